#!/usr/bin/env bash
# Builds the TypeScript client and runs its test suite (node --test) against real idgen nodes.
#
#   IDGEN_BIN   the server binary [default: <repo>/target/debug/idgen]; the suite FAILS if it is
#               missing (build it with `cargo build -p idgen`)
#   IDGEN_TEST_CERTS_BIN  the test kit's certificate writer [default: built and run with
#               `cargo run -p idgen-testkit --bin idgen-test-certs`]; the TLS tests use the
#               certificates it writes into a temporary directory (never committed ones)
#   IDGEN_FAKE_NODES_BIN  the test kit's fake nodes for the shared behaviour scenarios
#               (clients/vectors/SCENARIOS.md) [default: built with `cargo build -q -p
#               idgen-testkit --bin idgen-fake-nodes` into <repo>/target/debug]
#   ETCD_BIN    etcd for the cluster tests [default: etcd on PATH]
#
# Installs the dev dependencies with `npm ci` and builds with `tsc` (build.sh: from
# package-lock.json, offline from npm's cache when the registry is unreachable), runs `npm test`.
# The npm package as a user installs it (npm pack, the tarball in an empty project) is checked
# by scripts/package. Exits non-zero on any failure; prints a summary line last.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export IDGEN_BIN="${IDGEN_BIN:-$repo/target/debug/idgen}"
cd "$here"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/idgen-tsclient.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

bash "$here/build.sh"

echo "==> IDGEN_BIN=$IDGEN_BIN"
if [ -z "${IDGEN_FAKE_NODES_BIN:-}" ]; then
  echo "==> cargo build -q -p idgen-testkit --bin idgen-fake-nodes"
  (cd "$repo" && cargo build -q -p idgen-testkit --bin idgen-fake-nodes)
  IDGEN_FAKE_NODES_BIN="$repo/target/debug/idgen-fake-nodes"
fi
export IDGEN_FAKE_NODES_BIN
echo "==> IDGEN_FAKE_NODES_BIN=$IDGEN_FAKE_NODES_BIN (the behaviour scenarios, dist/test/scenarios.test.js)"
echo "==> test certificates in $tmp/certs"
bash "$repo/clients/test-certs.sh" "$tmp/certs"
export IDGEN_TEST_CERTS="$tmp/certs"

echo "==> npm test"
set +e
npm test --silent 2>&1 | tee "$tmp/test.log"
status=${PIPESTATUS[0]}
set -e

count() { grep -E "^ℹ $1 [0-9]+" "$tmp/test.log" | tail -1 | awk '{print $3}'; }
tests="$(count tests)"; pass="$(count pass)"; fail="$(count fail)"
cancelled="$(count cancelled)"; skipped="$(count skipped)"; todo="$(count todo)"
echo
if [ "$status" -ne 0 ] || [ -z "$tests" ] || [ "${fail:-1}" != "0" ] || [ "${cancelled:-1}" != "0" ] \
   || [ "${skipped:-0}" != "0" ] || [ "${todo:-0}" != "0" ] || [ "${tests:-0}" = "0" ]; then
  echo "typescript client: tests FAILED (tests ${tests:-?}, pass ${pass:-?}, fail ${fail:-?}, cancelled ${cancelled:-?}, skipped ${skipped:-?})"
  exit 1
fi
echo "typescript client: ${tests} tests, ${pass} passed, 0 failed"
