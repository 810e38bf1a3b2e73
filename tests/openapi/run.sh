#!/usr/bin/env bash
# Checks docs/openapi.yaml against a live node with an independent client: Python's
# http.client, validated by openapi-core and openapi-spec-validator (pinned in
# requirements.txt, installed from PyPI into a throwaway venv).
#
#   IDGEN_BIN   the server binary [default: <repo>/target/debug/idgen]; the suite FAILS if
#               it is missing (build it with `cargo build -p idgen`)
#   PYTHON      the interpreter to make the venv with [default: python3]
#
# Exits non-zero on any failure (an install that fails included); prints the unittest
# summary line last.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export IDGEN_BIN="${IDGEN_BIN:-$repo/target/debug/idgen}"
python="${PYTHON:-python3}"
[ -x "$IDGEN_BIN" ] || { echo "openapi: IDGEN_BIN=$IDGEN_BIN is missing: cargo build -p idgen" >&2; exit 1; }

tmp="$(mktemp -d "${TMPDIR:-/tmp}/idgen-openapi.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "==> venv in $tmp ($("$python" --version 2>&1))"
"$python" -m venv "$tmp/venv"
venv_py="$tmp/venv/bin/python"
echo "==> pip install -r $here/requirements.txt"
if ! "$venv_py" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt" 2>"$tmp/pip.log"; then
  cat "$tmp/pip.log" >&2
  echo "openapi: installing the validators FAILED" >&2
  exit 1
fi
echo "==> IDGEN_BIN=$IDGEN_BIN"

echo "==> python -m unittest discover -s $here -v"
set +e
"$venv_py" -m unittest discover -s "$here" -t "$here" -v 2>&1 | tee "$tmp/unittest.log"
status=${PIPESTATUS[0]}
set -e

echo
summary="$(grep -E '^Ran [0-9]+ tests? in ' "$tmp/unittest.log" | tail -1 || true)"
result="$(grep -E '^(OK|FAILED)( |$)' "$tmp/unittest.log" | tail -1 || true)"
echo "openapi: ${summary:-no unittest summary} — ${result:-no result}"
if [ "$status" -ne 0 ] || [ "${result%% *}" != "OK" ]; then
  echo "openapi: the document does NOT match the live node" >&2
  exit 1
fi
