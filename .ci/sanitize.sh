#!/usr/bin/env bash
# CI: the C++ core and its tests (ctest) built with AddressSanitizer and UndefinedBehaviorSanitizer
# in a separate build folder (CUDA off, no Python module), then run. Any report fails the run:
# UBSan does not recover, ASan aborts on its first error. Usage: .ci/sanitize.sh [build-dir]
# (about 2.5 min of CPU on 2 cores: user 2m27s measured for the build and tests). The CUDA
# emulation checker is left out here: pytest's tests/test_cuda.py builds and runs it, and under
# the sanitizers its full case table would take most of CI's time.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-sanitize}"
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all -g -O1"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHELMPINN_ENABLE_CUDA=OFF -DHELMPINN_PYTHON=OFF -DHELMPINN_BUILD_TESTS=ON \
  -DHELMPINN_INSTALL=OFF -DHELMPINN_BUILD_CUDA_EMULATION=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
cmake --build "$build" -j "${HELMPINN_CI_JOBS:-2}"
# detect_leaks: the tests free everything; halt_on_error: the first report fails the test.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
# test_alloc is left out: its counting allocator replaces malloc and operator new, which
# AddressSanitizer must own (it segfaults under ASan); the other tests cover the same calls.
ctest --test-dir "$build" --output-on-failure -E "helmpinn[.]alloc"
