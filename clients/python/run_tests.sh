#!/usr/bin/env bash
# Installs the Python client with its `mask` and `otel` extras (cryptography and
# opentelemetry-api, from PyPI) into a throwaway venv (proving
# `pip install './clients/python[mask,otel]'` works), adds opentelemetry-sdk for the
# OpenTelemetry test (its in-memory exporter), checks the package with `mypy --strict` (mypy
# from PyPI, into the same venv) and runs its unittest suite with that venv's python against
# a real idgen server.
#
#   IDGEN_BIN   the server binary [default: <repo>/target/debug/idgen]; the suite FAILS if
#               it is missing (build it with `cargo build -p idgen`)
#   PYTHON      the interpreter to make the venv with [default: python3]
#   IDGEN_TEST_CERTS_BIN  the test kit's certificate writer [default: built and run with
#               `cargo run -p idgen-testkit --bin idgen-test-certs`]; the TLS tests use the
#               certificates it writes into the temporary directory (never committed ones)
#   IDGEN_FAKE_NODES_BIN  the test kit's fake nodes for the behaviour scenarios of
#               clients/vectors/scenarios.json (test_scenarios.py) [default: built with
#               `cargo build -q -p idgen-testkit --bin idgen-fake-nodes` into the repo's target dir]
#
# Exits non-zero on any failure; prints the unittest summary line last.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export IDGEN_BIN="${IDGEN_BIN:-$repo/target/debug/idgen}"
python="${PYTHON:-python3}"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/idgen-pyclient.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "==> venv in $tmp ($("$python" --version 2>&1))"
"$python" -m venv "$tmp/venv"
venv_py="$tmp/venv/bin/python"

echo "==> pip install $here[mask,otel]"
if ! "$venv_py" -m pip install --quiet --disable-pip-version-check "$here[mask,otel]" 2>"$tmp/pip.log"; then
  # No package index reachable for the isolated build's setuptools: build with the venv's.
  echo "    (isolated build failed, retrying with --no-build-isolation)"
  "$venv_py" -m pip install --quiet --disable-pip-version-check --no-build-isolation "$here[mask,otel]" \
    || { cat "$tmp/pip.log" >&2; exit 1; }
fi
# Run from the temp dir so the tests import the installed copy, not the source tree.
cd "$tmp"
where="$("$venv_py" -c 'import idgen_client; print(idgen_client.__file__)')"
case "$where" in
  "$tmp"/venv/*) echo "    installed: $where" ;;
  *) echo "run_tests.sh: idgen_client imported from $where, not from the venv" >&2; exit 1 ;;
esac

# The OpenTelemetry test's SDK (in-memory span exporter), a test dependency only; pinned like
# mypy (it pins the matching opentelemetry-api).
otel_sdk_version=1.45.2
echo "==> pip install opentelemetry-sdk==$otel_sdk_version"
"$venv_py" -m pip install --quiet --disable-pip-version-check "opentelemetry-sdk==$otel_sdk_version" 2>"$tmp/otel-pip.log" \
  || { cat "$tmp/otel-pip.log" >&2; echo "run_tests.sh: cannot install opentelemetry-sdk $otel_sdk_version (from PyPI)" >&2; exit 1; }

# The package type-checks for its users (py.typed) and for itself: mypy --strict over the
# sources, with a pinned mypy (a newer one may find new things; move the pin on purpose).
mypy_version=2.4.1
echo "==> mypy $mypy_version --strict -p idgen_client"
"$venv_py" -m pip install --quiet --disable-pip-version-check "mypy==$mypy_version" 2>"$tmp/mypy-pip.log" \
  || { cat "$tmp/mypy-pip.log" >&2; echo "run_tests.sh: cannot install mypy $mypy_version (from PyPI)" >&2; exit 1; }
(cd "$here" && "$venv_py" -m mypy --strict --cache-dir "$tmp/mypy-cache" -p idgen_client) \
  || { echo "run_tests.sh: mypy --strict -p idgen_client FAILED" >&2; exit 1; }

echo "==> IDGEN_BIN=$IDGEN_BIN"

# The behaviour scenarios' fake nodes (test_scenarios.py): given, else built by cargo.
if [ -z "${IDGEN_FAKE_NODES_BIN:-}" ]; then
  echo "==> cargo build -q -p idgen-testkit --bin idgen-fake-nodes"
  (cd "$repo" && cargo build -q -p idgen-testkit --bin idgen-fake-nodes)
  IDGEN_FAKE_NODES_BIN="$(cd "$repo" && realpath -m "${CARGO_TARGET_DIR:-target}")/debug/idgen-fake-nodes"
fi
export IDGEN_FAKE_NODES_BIN
echo "==> IDGEN_FAKE_NODES_BIN=$IDGEN_FAKE_NODES_BIN"

echo "==> test certificates in $tmp/certs"
bash "$repo/clients/test-certs.sh" "$tmp/certs"
export IDGEN_TEST_CERTS="$tmp/certs"

echo "==> python -m unittest discover -s $here/tests -v"
set +e
"$venv_py" -m unittest discover -s "$here/tests" -t "$here/tests" -v 2>&1 | tee "$tmp/unittest.log"
status=${PIPESTATUS[0]}
set -e

echo
summary="$(grep -E '^Ran [0-9]+ tests? in ' "$tmp/unittest.log" | tail -1 || true)"
result="$(grep -E '^(OK|FAILED)( |$)' "$tmp/unittest.log" | tail -1 || true)"
echo "python client: ${summary:-no unittest summary} — ${result:-no result}"
if [ "$status" -ne 0 ] || [ "${result%% *}" != "OK" ]; then
  echo "python client: tests FAILED" >&2
  exit 1
fi
