#!/usr/bin/env bash
# helmpinn on a machine with a GPU and nvcc, in one run:
#
#     OUT=dir bash benchmarks/gpu_check.sh             # on the GPU machine
#     OUT=dir bash benchmarks/gpu_check.sh --dry-run   # anywhere: prints the commands; runs nothing on a GPU
#
# Stages, in order; each one's exit code and seconds go to $OUT/stages.tsv, a failing stage does
# not stop the run, and the exit status is 0 only when every stage passed:
#   build     the package with its CUDA backend into $BUILD/site (pip, no build isolation, so the
#             machine's scikit-build-core and pybind11 are used; ptxas -v into $OUT/build.log)
#   tests     pytest over the GPU test files with HELMPINN_REQUIRE_GPU=1 (a GPU test, or a
#             PyTorch / CuPy one, that cannot run FAILS instead of skipping); JUnit XML in
#             $OUT/junit.xml, the log in $OUT/tests.log; the CPU-emulation tests are CI's
#   sanitize  benchmarks/gpu_sanitize.sh: the four compute-sanitizer tools ($OUT/sanitize.log)
#   bench     benchmarks/gpu_bench.py ($OUT/bench.json)
# Each stage is capped by its own limit and by the run's deadline (GPU_CHECK_DEADLINE_S, default
# 540 s); a stage the deadline leaves too little time for is recorded as skipped.
# The dry run checks what can be checked without a GPU: the GPU tests are collected (the files
# and the selection exist), the sanitizer and benchmark scripts run in their dry-run modes; its
# stages.tsv and summary.md say DRY RUN, and nothing in them is a measurement.
# Knobs: PYTHON=python3  CUDA_ARCH=90-real  BUILD=build/gpu-check  OUT=$BUILD/out
# Not yet run on a GPU: no GPU was available to the sessions that wrote it.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DRY=0
for a in "$@"; do
  case $a in
    --dry-run) DRY=1 ;;
    -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$a' (expected --dry-run)" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
BUILD=${BUILD:-$ROOT/build/gpu-check}
OUTDIR=${OUT:-$BUILD/out}
DEADLINE=${GPU_CHECK_DEADLINE_S:-540}
mkdir -p "$OUTDIR" || exit 2
printf 'stage\tstatus\texit\tseconds\n' > "$OUTDIR/stages.tsv"
export PYTHONUNBUFFERED=1 OUT=$OUTDIR
GPU_TESTS=(tests/test_cuda.py tests/test_device.py tests/test_backend_cases.py::test_cuda_against_cpu
           tests/test_cuda_residuals.py tests/test_cuda_operator.py tests/test_cli.py::test_train_on_gpu)
TIMEOUT=()
"$PY" -c "import pytest_timeout" 2>/dev/null && TIMEOUT=(--timeout=90)

# stage NAME MIN CAP COMMAND...: runs COMMAND for at most CAP seconds (less if the deadline is
# nearer), or records it as skipped when fewer than MIN seconds are left.
failed=0
stage() {
  local name=$1 min=$2 cap=$3 t0=$SECONDS rc status
  shift 3
  local left=$((DEADLINE - SECONDS))
  printf '\n==== [%3ss] %s\n' "$SECONDS" "$name"
  if ((left < min)); then
    status="skipped (deadline: ${left} s left, needs ${min})"; rc=-
  else
    timeout -k 10 $((left < cap ? left : cap)) "$@"
    rc=$?
    case $rc in 0) status=ok ;; 124|137) status="timed out" ;; *) status=failed ;; esac
  fi
  ((DRY)) && status="DRY RUN, $status"
  [[ $status == *ok ]] || failed=1
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" $((SECONDS - t0)) >> "$OUTDIR/stages.tsv"
  echo "$name: $status"
}

if ((DRY)); then
  echo "DRY RUN: nothing below runs on a GPU, and no number it prints is a measurement"
  stage build 1 30 echo "DRY RUN, would run: $PY -m pip install -v --no-build-isolation --no-deps" \
    "--target $BUILD/site $ROOT -Cbuild-dir=$BUILD/cmake -Ccmake.define.HELMPINN_ENABLE_CUDA=ON" \
    "-Ccmake.define.HELMPINN_CUDA_VERBOSE=ON -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90-real}"
  # The real selection, collected only: a renamed test file or test fails here.
  stage tests 1 120 bash -c 'cd "$1" && shift && "$@" > "$OUT/tests.log" 2>&1; rc=$?; tail -3 "$OUT/tests.log"; exit $rc' \
    _ "$ROOT" "$PY" -m pytest --collect-only -q -p no:cacheprovider "${GPU_TESTS[@]}" -k "not under_cpu_emulation"
  stage sanitize 1 30 bash "$ROOT/benchmarks/gpu_sanitize.sh" --dry-run
  stage bench 1 60 "$PY" "$ROOT/benchmarks/gpu_bench.py" --dry-run
else
  build() {
    command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
    nvidia-smi; nvcc --version | tail -2
    "$PY" -m pip install -v --no-build-isolation --no-deps --upgrade --target "$BUILD/site" "$ROOT" \
      -Cbuild-dir="$BUILD/cmake" -Ccmake.define.HELMPINN_ENABLE_CUDA=ON \
      -Ccmake.define.HELMPINN_CUDA_VERBOSE=ON \
      -Ccmake.define.CMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90-real}" > "$OUT/build.log" 2>&1
    local rc=$?
    grep -E "registers|spill" "$OUT/build.log" | sort | uniq -c | sort -rn | head -8
    ((rc == 0)) || { tail -30 "$OUT/build.log"; return "$rc"; }
    "$PY" -c 'import helmpinn as h, sys
print("helmpinn", h.__file__, "has_cuda", h.has_cuda(), "devices", h.cuda_device_count(), h.cuda_device_error() or "")
sys.exit(0 if h.has_cuda() and h.cuda_device_count() > 0 else 3)'
  }
  run_tests() {
    (cd "$ROOT" && HELMPINN_REQUIRE_GPU=1 "$PY" -m pytest -v -rs -p no:cacheprovider "$@") \
      > "$OUT/tests.log" 2>&1
    local rc=$?
    tail -15 "$OUT/tests.log"
    return "$rc"
  }
  export -f build run_tests
  export PY ROOT BUILD PYTHONPATH="$BUILD/site${PYTHONPATH:+:$PYTHONPATH}"
  stage build 60 300 bash -c build
  stage tests 30 200 bash -c 'run_tests "$@"' _ "${TIMEOUT[@]}" --junitxml="$OUTDIR/junit.xml" \
    "${GPU_TESTS[@]}" -k "not under_cpu_emulation"
  stage sanitize 30 200 env GPU_SANITIZE_TIMEOUT=45 bash "$ROOT/benchmarks/gpu_sanitize.sh"
  stage bench 20 120 "$PY" "$ROOT/benchmarks/gpu_bench.py" --json "$OUTDIR/bench.json"
fi

{
  ((DRY)) && echo "**DRY RUN: nothing ran on a GPU; no number in this file was measured.**" && echo
  echo "helmpinn gpu_check, commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%FT%TZ), ${SECONDS} s"
  echo
  echo "| stage | status | exit | seconds |"
  echo "|---|---|---|---|"
  tail -n +2 "$OUTDIR/stages.tsv" | awk -F'\t' '{ printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4 }'
  [[ -f $OUTDIR/junit.xml ]] && grep -m1 -o '<testsuite [^>]*>' "$OUTDIR/junit.xml"
} > "$OUTDIR/summary.md"
echo
cat "$OUTDIR/summary.md"
exit "$failed"
