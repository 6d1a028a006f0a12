#!/usr/bin/env bash
# CI: build the documentation with every warning an error (a broken link between pages, a
# docstring that does not parse, a missing include). Called by .ci/run from the repository root,
# in the CI environment, after `pip install ".[docs]"`; helmpinn must be importable (installed).
# Builds into a temporary folder, removed afterwards; exits non-zero on any warning.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d "${TMPDIR:-/tmp}/helmpinn-docs.XXXXXX")
trap 'rm -rf "$out"' EXIT
# helmpinn comes from the installation (the repository root holds no importable helmpinn; a
# source checkout with the compiled module in place works with PYTHONPATH=python).
python3 -c "import helmpinn, sys; print('docs of helmpinn', helmpinn.__version__, 'from', helmpinn.__file__)"
python3 -m sphinx -W --keep-going -q -b html -d "$out/doctrees" docs "$out/html"
# A signature Sphinx could not parse is printed raw, each annotation with a literal "~"
# (~helmpinn.problems.Problem); docs/conf.py keeps them parseable. None may be left.
if raw=$(grep -rlE 'class="pre">[^<]*~[A-Za-z_]+\.' "$out/html" --include='*.html'); then
  echo "docs: signatures printed raw (a literal ~ before an annotation) in:"; echo "$raw"; exit 1
fi
echo "docs: built without warnings"
