#!/usr/bin/env bash
# helmpinn on a GPU machine, in one run that ends before its deadline and never stops early:
#
#     OUT=dir bash benchmarks/gpu_check.sh            # on the GPU machine
#     OUT=dir bash benchmarks/gpu_check.sh --dry-run  # anywhere: GPU steps stubbed (< 2 min)
#
# Stages, in this order, each one's exit code and time recorded (a failing stage does not end
# the run; a stage that the deadline leaves no time for is reported as skipped):
#   env        tools, Python packages (wheels carried in .whl/ are installed first), the GPU
#   build      the CUDA module (cmake, ptxas -v: registers, spills, static shared memory)
#   tests      tests/test_cuda.py, test_device.py (Model / Trainer on device="cuda" against
#              the CPU), test_backend_cases.py (the loss-case table: loss, gradient and the
#              residual level against the CPU; its GPU half), test_cuda_residuals.py (counts,
#              a wide network's rows) and test_cuda_operator.py, in that order, with
#              HELMPINN_REQUIRE_GPU=1 (GPU tests, and the PyTorch/CuPy ones, fail instead of
#              skipping) and a per-test timeout; the first failing (or hung) test is run again
#              with CUDA_LAUNCH_BLOCKING=1
#   agreement  GPU vs CPU in float64 (threshold 1e-12 relative) and float32, configs a, b, c
#   sanitize   compute-sanitizer memcheck, racecheck, synccheck, initcheck over both dtypes,
#              the seed primitives, odd tiles, global scratch, frozen Fourier features,
#              derivatives 0/1/2 and a width-256 d = 3 network; a tool that refuses the device
#              is reported as "refused" (nothing checked), apart from findings
#   bench      helmpinn float32 steps, configs a b c b65k b1m; tile sweep on b65k; FP32 peak
#   scale      a cache above 2^31 elements; width-256 d = 3 networks in both dtypes vs the CPU
#   peers      PyTorch eager, JAX (forward Laplacian), torch.compile last
# Files in $OUT (6 at most): summary.md (the answer at a glance), results.json, run.log,
# build.log, tests.log, sanitize.log. The summary is rewritten after every stage, so a run cut
# short still has one; it is printed at the end.
#
# Knobs (environment): PYTHON=python3  CUDA_ARCH=90-real  BUILD=build/gpu-check  OUT=$BUILD/out
#   GPU_CHECK_DEADLINE_S=540 (whole run)  GPU_CHECK_TEST_TIMEOUT=90 (per test, seconds)
#   dry run only: GPU_CHECK_STUB_SLEEP (seconds each stubbed stage takes), GPU_CHECK_STUB_FAIL
#   (e.g. "tests"), GPU_CHECK_STUB_REFUSE / GPU_CHECK_STUB_FIND (sanitizer tools, comma list).
# Nothing is fetched: the machine's python3 must have numpy, pybind11 and pytest (pytest-timeout,
# torch, jax, cupy optional) or they must be carried as wheels in .whl/ (device README).
set -u -o pipefail   # deliberately no -e: every stage runs and its exit code is recorded

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DRY=0
for a in "$@"; do
  case "$a" in
    --dry-run) DRY=1 ;;
    -h|--help) sed -n '2,33p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$a' (expected --dry-run)" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
BUILD=${BUILD:-$ROOT/build/gpu-check}
OUTDIR=${OUT:-$BUILD/out}
WORK=$BUILD/work
ARCH=${CUDA_ARCH:-90-real}
DEADLINE=${GPU_CHECK_DEADLINE_S:-540}
RESERVE=${GPU_CHECK_RESERVE_S:-10}        # kept for the last summary
TEST_TIMEOUT=${GPU_CHECK_TEST_TIMEOUT:-90}
STUB_SLEEP=${GPU_CHECK_STUB_SLEEP:-0}
PKG=$BUILD/pkg
CASES=$ROOT/benchmarks/gpu_cases.py
SUMMARY=$ROOT/benchmarks/gpu_summary.py
RES=$WORK/results.jsonl

rm -rf "$WORK" && mkdir -p "$WORK" "$OUTDIR" || { echo "cannot create $WORK / $OUTDIR"; exit 2; }
rm -f "$OUTDIR"/{summary.md,results.json,run.log,build.log,tests.log,sanitize.log}
: > "$RES"
: > "$WORK/stages.tsv"
exec > >(tee -a "$OUTDIR/run.log") 2>&1
TEE_PID=$!

T0=$(date +%s.%N)
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%d", b - a }'; }
left() { echo $(( DEADLINE - RESERVE - $(elapsed) )); }
say() { printf '\n==== [%4ss] %s ====\n' "$(elapsed)" "$*"; }
is_dry() { [[ $DRY == 1 ]]; }
stub_pause() { is_dry && [[ $STUB_SLEEP != 0 ]] && sleep "$STUB_SLEEP"; return 0; }
# Seconds the current stage may still use (its cap, and the run's deadline).
blim() {
  local used=$(( $(elapsed) - STAGE_T0 )) l
  l=$(left)
  local b=$(( STAGE_CAP - used ))
  (( l < b )) && b=$l
  (( b < 1 )) && b=1
  echo "$b"
}
export PYTHONUNBUFFERED=1

write_meta() {
  local nvcc_v commit
  nvcc_v=$( (command -v nvcc >/dev/null && nvcc --version | grep -o 'release [0-9.]*') || echo "not found")
  is_dry && nvcc_v="STUB"
  commit=${GPU_CHECK_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
  "$PY" - "$WORK/meta.json" "$nvcc_v" "$commit" "$(elapsed)" "${MISSING_TOOLS:-}" "$DRY" <<'EOF'
import json, sys
p, nvcc, commit, el, missing, dry = sys.argv[1:]
json.dump(dict(nvcc=nvcc, commit=commit, elapsed=int(el), missing_tools=missing, dry_run=dry == "1"),
          open(p, "w"))
EOF
}
summary() {
  write_meta
  local d=()
  is_dry && d=(--dry-run)
  "$PY" "$SUMMARY" summary --work "$WORK" --out "$OUTDIR" --deadline "$DEADLINE" "${d[@]}" \
    || echo "summary: gpu_summary.py failed (exit $?)"
}
record() {  # stage status rc seconds note
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${5:-}" >> "$WORK/stages.tsv"
}
# stage NAME MIN CAP FUNC: runs FUNC when at least MIN seconds are left, for at most CAP.
stage() {
  local name=$1 min=$2 cap=$3 fn=$4 l
  l=$(left)
  say "stage $name ($l s left before the deadline)"
  if (( l < min )); then
    record "$name" "skipped (deadline)" - 0 "$l s left, needs $min"
    echo "skipped: $l s left, the stage needs $min"
    summary
    return
  fi
  STAGE_T0=$(elapsed)
  STAGE_CAP=$cap
  STAGE_NOTE=""
  "$fn"
  local rc=$? status
  case $rc in
    0) status=ok ;;
    124|137) status="timed out" ;;
    *) status=failed ;;
  esac
  is_dry && status="$status (stub)"
  record "$name" "$status" "$rc" "$(( $(elapsed) - STAGE_T0 ))" "$STAGE_NOTE"
  echo "stage $name: $status (exit $rc)${STAGE_NOTE:+: $STAGE_NOTE}"
  summary
}
on_signal() {
  record "${CURRENT:-?}" "interrupted" - "$(elapsed)" "signal"
  summary
  exit 130
}
trap on_signal TERM INT
py_has() { "$PY" -c "import $1" >/dev/null 2>&1; }

# ------------------------------------------------------------------------------------ env
st_env() {
  local rc=0
  if compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
    echo "installing the carried wheels: $(cd "$ROOT/.whl" && ls *.whl | tr '\n' ' ')"
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$WORK/site" "$ROOT"/.whl/*.whl; then
      export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
    else
      STAGE_NOTE="wheel install failed; "
      rc=1
    fi
  fi
  local missing=()
  for t in cmake nvcc nvidia-smi compute-sanitizer; do
    command -v "$t" >/dev/null || [[ -x /usr/local/cuda/bin/$t ]] || missing+=("$t")
  done
  command -v ninja >/dev/null || echo "ninja not found: cmake's default generator"
  MISSING_TOOLS="${missing[*]:-}"
  is_dry && MISSING_TOOLS=""
  if ! is_dry; then
    nvidia-smi || echo "nvidia-smi failed (exit $?)"
    command -v nvcc >/dev/null && nvcc --version | tail -2
  fi
  local need=() m mods=(numpy pybind11 pytest)
  is_dry && mods=(numpy pytest)            # pybind11 is for the build, which a dry run stubs
  for m in "${mods[@]}"; do py_has "$m" || need+=("$m"); done
  if (( ${#need[@]} )); then
    STAGE_NOTE+="missing Python packages: ${need[*]} (carry wheels in .whl/)"
    rc=1
  fi
  [[ -n $MISSING_TOOLS ]] && STAGE_NOTE+="${STAGE_NOTE:+; }missing tools: $MISSING_TOOLS"
  local s=()
  is_dry && s=(--stub)
  timeout -k 5 "$(blim)" "$PY" "$CASES" env "${s[@]}" >> "$RES" || rc=1
  stub_pause
  return $rc
}

# ------------------------------------------------------------------------------------ build
st_build() {
  if is_dry; then
    {
      echo "STUB build log (dry run): no compilation happened"
      echo "ptxas info    : Compiling entry function '_ZN8helmpinn4cuda12train_kernelIfLi2ELb0EEEvSTUB' for 'sm_90'"
      echo "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
      echo "ptxas info    : Used 128 registers, used 1 barriers"
    } > "$OUTDIR/build.log"
    "$PY" "$SUMMARY" ptxas "$OUTDIR/build.log" >> "$RES"
    rm -rf "$PKG" && mkdir -p "$PKG" && cp -r "$ROOT/python/helmpinn" "$PKG/"
    stub_pause
    return 0
  fi
  if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
    STAGE_NOTE="nvcc not found"; return 1
  fi
  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  local gen=() pyb
  command -v ninja >/dev/null && gen=(-G Ninja)
  pyb=$("$PY" -c 'import pybind11; print(pybind11.get_cmake_dir())') || { STAGE_NOTE="pybind11 missing"; return 1; }
  timeout -k 5 "$(blim)" cmake -S "$ROOT" -B "$BUILD/cmake" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DHELMPINN_PYTHON=ON -DHELMPINN_ENABLE_CUDA=ON -DHELMPINN_CUDA_VERBOSE=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DPython_EXECUTABLE="$(command -v "$PY")" \
    -Dpybind11_DIR="$pyb" > "$OUTDIR/build.log" 2>&1
  local rc=$?
  if (( rc == 0 )); then
    timeout -k 5 "$(blim)" cmake --build "$BUILD/cmake" --target _core -j "$(nproc)" >> "$OUTDIR/build.log" 2>&1
    rc=$?
  fi
  "$PY" "$SUMMARY" ptxas "$OUTDIR/build.log" >> "$RES"
  grep -E "spill|registers" "$OUTDIR/build.log" | sort | uniq -c | sort -rn | head -6
  if (( rc != 0 )); then
    tail -30 "$OUTDIR/build.log"
    STAGE_NOTE="cmake failed, see build.log"
    return $rc
  fi
  rm -rf "$PKG" && mkdir -p "$PKG" && cp -r "$ROOT/python/helmpinn" "$PKG/"
  rm -f "$PKG"/helmpinn/_core*.so
  cp "$BUILD"/cmake/_core*.so "$PKG/helmpinn/" || { STAGE_NOTE="no _core module built"; return 1; }
  export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"
  timeout -k 5 "$(blim)" "$PY" "$CASES" env >> "$RES"
  "$PY" -c 'import helmpinn as h; import sys; print("helmpinn", h.__file__, "devices", h.cuda_device_count(), h.cuda_device_error() or ""); sys.exit(0 if h.has_cuda() and h.cuda_device_count() > 0 else 3)' \
    || { STAGE_NOTE="built, but no usable GPU: $("$PY" -c 'import helmpinn as h; print(h.cuda_device_error())' 2>&1 | tail -1)"; return 3; }
}

# ------------------------------------------------------------------------------------ tests
st_tests() {
  local to=() files=() env=(HELMPINN_REQUIRE_GPU=1 HELMPINN_EXPECT_CUDA=1) sel=() dir=$ROOT
  if py_has pytest_timeout; then
    to=(--timeout="$TEST_TIMEOUT" --timeout_method=thread)
  else
    STAGE_NOTE="no per-test timeout (pytest-timeout missing); "
  fi
  if is_dry; then
    # The same pytest invocation, parsing and rerun on a stand-in test file.
    dir=$WORK
    files=("test_stub_gpu.py")
    {
      echo "import pytest"
      echo "def test_stub_passes(): assert True"
      echo "def test_stub_skips_visibly(): pytest.skip('STUB: a visible skip')"
      [[ ,${GPU_CHECK_STUB_FAIL:-}, == *,tests,* ]] && echo "def test_stub_fails(): assert False, 'STUB failure'"
    } > "$WORK/${files[0]}"
    env=(HELMPINN_STUB=1)
  else
    # the table's GPU half only (its CPU half runs in CI), then the general operator
    files=("$ROOT/tests/test_cuda.py" "$ROOT/tests/test_device.py"
           "$ROOT/tests/test_backend_cases.py::test_cuda_against_cpu"
           "$ROOT/tests/test_cuda_residuals.py" "$ROOT/tests/test_cuda_operator.py")
    sel=(-k "not under_cpu_emulation")   # CPU-only, run by CI everywhere
  fi
  ( cd "$dir" && env "${env[@]}" timeout -k 5 "$(blim)" "$PY" -m pytest "${files[@]}" "${sel[@]}" \
      -v -rs -p no:cacheprovider "${to[@]}" ) > "$OUTDIR/tests.log" 2>&1
  local rc=$?
  tail -15 "$OUTDIR/tests.log"
  "$PY" "$SUMMARY" pytest "$OUTDIR/tests.log" > "$WORK/tests.json"
  cat "$WORK/tests.json" >> "$RES"
  local first
  first=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["first_failed"] or "")' "$WORK/tests.json")
  if [[ -n $first ]]; then
    local b
    b=$(blim); (( b > 120 )) && b=120
    echo "first failure: $first; again with CUDA_LAUNCH_BLOCKING=1 ($b s at most)"
    { echo; echo "==== rerun with CUDA_LAUNCH_BLOCKING=1: $first"; } >> "$OUTDIR/tests.log"
    ( cd "$dir" && env "${env[@]}" CUDA_LAUNCH_BLOCKING=1 timeout -k 5 "$b" "$PY" -m pytest "$first" \
        -v -p no:cacheprovider "${to[@]}" ) >> "$OUTDIR/tests.log" 2>&1
    local rr=$?
    printf '{"kind": "rerun", "test": "%s", "rc": %d}\n' "$first" "$rr" >> "$RES"
    STAGE_NOTE+="first failure rerun with CUDA_LAUNCH_BLOCKING=1: exit $rr"
  fi
  stub_pause
  return $rc
}

# ------------------------------------------------------------------------------------ checks
run_case() {  # run_case SUBCOMMAND: gpu_cases.py records into results.jsonl
  local s=()
  is_dry && s=(--stub)
  timeout -k 5 "$(blim)" "$PY" "$CASES" "$1" "${s[@]}" >> "$RES" 2> "$WORK/stderr_$1.log"
  local rc=$?
  cat "$WORK/stderr_$1.log"
  (( rc != 0 )) && STAGE_NOTE+=$(grep -v '^\s*$' "$WORK/stderr_$1.log" | grep -v '^helmpinn CUDA plan' | tail -1 | cut -c1-200)
  stub_pause
  return $rc
}
st_agreement() {
  run_case agreement || return $?
  "$PY" - "$RES" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
a = [r for r in recs if r.get("kind") == "agreement" and r["dtype"] == "float64"]
worst = max(max(v.values()) for v in a[-1]["cases"].values()) if a else float("inf")
print(f"float64 agreement: worst relative error {worst:.2e} (threshold {a[-1]['tol'] if a else '?'})")
sys.exit(0 if a and worst < a[-1]["tol"] else 1)
EOF
}
st_scale() { run_case scale; }
st_bench() { run_case bench; }

st_sanitize() {
  local san tools=(memcheck racecheck synccheck initcheck) i=0 worst=0
  if is_dry; then
    san="stub"
  else
    san=$(command -v compute-sanitizer || { [[ -x /usr/local/cuda/bin/compute-sanitizer ]] && echo /usr/local/cuda/bin/compute-sanitizer; })
    [[ -z $san ]] && { STAGE_NOTE="compute-sanitizer not found"; return 1; }
  fi
  : > "$OUTDIR/sanitize.log"
  for tool in "${tools[@]}"; do
    local n=$(( ${#tools[@]} - i )) b
    b=$(( $(blim) / n ))
    i=$((i + 1))
    if (( b < 5 )); then
      printf '{"kind": "sanitizer", "tool": "%s", "verdict": "skipped (deadline)", "rc": null, "errors": null}\n' "$tool" >> "$RES"
      continue
    fi
    echo "-- $tool ($b s at most)"
    local log=$WORK/san_$tool.log rc
    if is_dry; then
      timeout -k 5 "$b" "$PY" "$CASES" stub-sanitizer --tool "$tool" > "$log" 2>&1
    else
      timeout -k 5 "$b" "$san" --tool "$tool" --print-limit 20 \
        "$PY" "$CASES" sanitize-case > "$log" 2>&1
    fi
    rc=$?
    { echo "==== $tool: exit $rc"; head -150 "$log"; echo "[...]"; tail -30 "$log"; } >> "$OUTDIR/sanitize.log"
    "$PY" "$SUMMARY" sanitizer "$log" "$rc" --tool "$tool" | tee -a "$RES"
    local v
    v=$(tail -1 "$RES" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["verdict"])')
    case $v in
      clean) ;;
      findings) worst=1 ;;
      *) (( worst == 0 )) && worst=2 ;;
    esac
  done
  (( worst == 2 )) && STAGE_NOTE="a tool did not run to the end (refused, timed out or incomplete)"
  (( worst == 1 )) && STAGE_NOTE="findings: see sanitize.log"
  stub_pause
  return $worst
}

st_peers() {
  local impl rc=0 share
  for impl in torch-eager jax-fwdlap torch-compile; do
    local mod=${impl%%-*}
    if ! is_dry && ! py_has "$mod"; then
      echo "$impl: $mod is not importable, skipped"
      printf '{"kind": "bench", "impl": "%s", "config": "b65k", "n_pde": 65536, "gflop": 0, "error": "%s not importable"}\n' "$impl" "$mod" >> "$RES"
      STAGE_NOTE+="$impl: $mod missing; "
      rc=1
      continue
    fi
    case $impl in
      torch-eager) share=$(( $(blim) / 4 )) ;;
      jax-fwdlap) share=$(( $(blim) / 3 )) ;;
      *) share=$(blim) ;;                       # torch.compile last, with what is left
    esac
    echo "-- $impl ($share s at most)"
    local s=()
    is_dry && s=(--stub)
    timeout -k 5 "$share" "$PY" "$CASES" peer --impl "$impl" "${s[@]}" >> "$RES"
    local r=$?
    (( r != 0 )) && { STAGE_NOTE+="$impl: exit $r; "; rc=$r; }
  done
  stub_pause
  return $rc
}

# ------------------------------------------------------------------------------------ run
say "helmpinn gpu_check: deadline ${DEADLINE} s$(is_dry && echo ', DRY RUN (GPU steps stubbed)'), OUT=$OUTDIR"
#      name      min  cap  function
CURRENT=env;       stage env        5   60  st_env
CURRENT=build;     stage build     30  300  st_build
[[ -d $PKG ]] && export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"
CURRENT=tests;     stage tests     20  180  st_tests
CURRENT=agreement; stage agreement 10   60  st_agreement
CURRENT=sanitize;  stage sanitize  20  150  st_sanitize
CURRENT=bench;     stage bench     20  100  st_bench
CURRENT=scale;     stage scale     15   80  st_scale
CURRENT=peers;     stage peers     15  600  st_peers
CURRENT=done
say "done in $(elapsed) s; files in $OUTDIR: $(ls "$OUTDIR" | tr '\n' ' ')"
cat "$OUTDIR/summary.md"
# Exit 0 only when every stage ran and passed (a dry run's stubs count as passing).
rc=0
cut -f2 "$WORK/stages.tsv" | grep -qv '^ok' && rc=1
exec 1>&- 2>&-
wait "$TEE_PID" 2>/dev/null
exit $rc
