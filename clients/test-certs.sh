#!/usr/bin/env bash
# Writes the client suites' test certificates into DIR (generated now, never committed ones):
# with $IDGEN_TEST_CERTS_BIN if set (scripts/test sets it), else through cargo.
#
#   clients/test-certs.sh DIR
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: clients/test-certs.sh DIR" >&2; exit 2; }
if [ -n "${IDGEN_TEST_CERTS_BIN:-}" ]; then
  "$IDGEN_TEST_CERTS_BIN" "$1" >/dev/null
else
  repo="$(cd "$(dirname "$0")/.." && pwd)"
  (cd "$repo" && cargo run --quiet -p idgen-testkit --bin idgen-test-certs -- "$1" >/dev/null)
fi
