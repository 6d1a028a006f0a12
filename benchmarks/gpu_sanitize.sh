#!/usr/bin/env bash
# The GPU tests under NVIDIA's compute-sanitizer, one tool after another, on a machine with a GPU:
#
#     bash benchmarks/gpu_sanitize.sh [--dry-run] [--tools memcheck,racecheck] [PYTEST ARGS...]
#
# Each tool (memcheck racecheck synccheck initcheck by default) runs `python -m pytest` over a
# small selection of the GPU tests (both dtypes, the tile and scratch knobs, a width-256 network,
# the seed primitives and the residual kernels; PYTEST ARGS replace it) with
# HELMPINN_REQUIRE_GPU=1, so a test that finds no device fails instead of skipping. Each tool
# gets a verdict:
#   clean      the tool reported 0 errors (racecheck: 0 hazards) and every test passed
#   findings   the tool reported errors or hazards (the first is printed)
#   refused    the tool or the tests could not use the device (nothing was checked)
#   timed out  the tool ran past GPU_SANITIZE_TIMEOUT seconds (default 300)
#   incomplete anything else: no summary line, or a test failed without a finding
# Log: $OUT/sanitize.log, every tool's output in turn (OUT defaults to build/gpu-sanitize).
# Exit status 0 only when every tool is clean. COMPUTE_SANITIZER names the tool (default:
# compute-sanitizer on the PATH or in /usr/local/cuda/bin). --dry-run prints the commands and
# runs nothing.
# Not yet run on a GPU: no GPU was available to the sessions that wrote it.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DRY=0 TOOLS="memcheck,racecheck,synccheck,initcheck" ARGS=()
while (($#)); do
  case $1 in
    --dry-run) DRY=1 ;;
    --tools) TOOLS=${2:?--tools needs a comma-separated list}; shift ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) ARGS+=("$1") ;;
  esac
  shift
done
if ((${#ARGS[@]} == 0)); then
  ARGS=(tests/test_cuda.py::test_forward_matches_cpu tests/test_cuda.py::test_tuning_knobs
        tests/test_cuda.py::test_launch_plan_fits_the_device
        "tests/test_cuda.py::test_device_primitives_match_numpy" tests/test_cuda_residuals.py
        -k "not torch and not cupy")
fi
OUT=${OUT:-$ROOT/build/gpu-sanitize}
SAN=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
PY=${PYTHON:-python3}

worst=0
((DRY)) || { mkdir -p "$OUT" && : > "$OUT/sanitize.log"; } || exit 2
for tool in ${TOOLS//,/ }; do
  cmd=("$SAN" --tool "$tool" --print-limit 20 --error-exitcode 99
       "$PY" -m pytest -x -q -p no:cacheprovider "${ARGS[@]}")
  if ((DRY)); then
    echo "DRY RUN, would run: (cd $ROOT && HELMPINN_REQUIRE_GPU=1 ${cmd[*]}) >> $OUT/sanitize.log"
    continue
  fi
  log=$(mktemp) || exit 2
  (cd "$ROOT" && HELMPINN_REQUIRE_GPU=1 timeout -k 10 "${GPU_SANITIZE_TIMEOUT:-300}" "${cmd[@]}") \
    > "$log" 2>&1
  rc=$?
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
  hazards=$(grep -oE 'RACECHECK SUMMARY: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
  if ((rc == 124 || rc == 137)); then
    verdict="timed out"
  elif [[ ${errors:-0} != 0 || ${hazards:-0} != 0 ]]; then
    verdict="findings (${errors:-0} errors, ${hazards:-0} hazards): $(grep -m1 -E '^=+ +(Invalid|Race|Barrier|Uninitialized|Error|Program hit)' "$log")"
  elif grep -qE 'Device not supported|no CUDA device visible|built without CUDA support|Unable to find' "$log"; then
    verdict="refused (nothing checked): $(grep -m1 -E 'Device not supported|no CUDA device visible|built without CUDA support|Unable to find' "$log" | cut -c1-160)"
  elif ((rc == 0)) && [[ -n $errors$hazards ]]; then
    verdict="clean"
  else
    verdict="incomplete (exit $rc$([[ -z $errors$hazards ]] && echo ', no summary line'))"
  fi
  [[ $verdict == clean ]] || worst=1
  { echo "==== $tool (exit $rc): $verdict"; cat "$log"; } >> "$OUT/sanitize.log"
  rm -f "$log"
  echo "$tool: $verdict"
done
exit "$worst"
