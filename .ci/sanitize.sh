#!/usr/bin/env bash
# CI: the C++ core and its tests (ctest) built with AddressSanitizer and UndefinedBehaviorSanitizer
# in a separate build folder (CUDA off, no Python module), then run. Any report fails the run:
# UBSan does not recover, ASan aborts on its first error. Usage: .ci/sanitize.sh [build-dir]
# One CPU kernel set, compiled for this machine (HELMPINN_NATIVE): the set the run-time dispatch
# would choose here, and the only one a run here executes. The CUDA emulation checker is left
# out: pytest's tests/test_cuda.py runs it (built here, it would compile the core's host sources
# a second time under the sanitizers). Without CUDA, test_errors checks the CUDA stub (CI's
# other builds have CUDA where nvcc is found).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-sanitize}"
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all -g"
# -O1, the sanitizers' usual level, last on every compile line (the compile rule below): the
# core's own options (-O3) come after CMAKE_CXX_FLAGS and would win, and -O3 under the
# sanitizers doubles the compile time of cpu_backend.cpp for no more checks (they instrument
# the source's operations; -O3 only drops or merges some of them).
rule="<CMAKE_CXX_COMPILER> <DEFINES> <INCLUDES> <FLAGS> -O1 -o <OBJECT> -c <SOURCE>"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILE_OBJECT="$rule" \
  -DHELMPINN_ENABLE_CUDA=OFF -DHELMPINN_PYTHON=OFF -DHELMPINN_BUILD_TESTS=ON \
  -DHELMPINN_INSTALL=OFF -DHELMPINN_BUILD_CUDA_EMULATION=OFF -DHELMPINN_NATIVE=ON \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
cmake --build "$build" -j "${HELMPINN_CI_JOBS:-2}"
# detect_leaks: the tests free everything; halt_on_error: the first report fails the test.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
# test_alloc is left out: its counting allocator replaces malloc and operator new, which
# AddressSanitizer must own (it segfaults under ASan); the other tests cover the same calls.
ctest --test-dir "$build" --output-on-failure -E "helmpinn[.]alloc"
