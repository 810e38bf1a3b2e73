#!/usr/bin/env bash
# Vets, builds and tests the Go client (standard library only, offline: no module proxy)
# against real idgen nodes, with the race detector when this toolchain has it.
#
#   IDGEN_BIN   the server binary [default: <repo>/target/debug/idgen]; the suite FAILS if
#               it is missing (build it with `cargo build -p idgen`)
#   IDGEN_TEST_CERTS_BIN  the test kit's certificate writer [default: built and run with
#               `cargo run -p idgen-testkit --bin idgen-test-certs`]; the TLS tests use the
#               certificates it writes into a temporary directory (never committed ones)
#   IDGEN_FAKE_NODES_BIN  the test kit's fake nodes of the shared behaviour scenarios
#               (clients/vectors/SCENARIOS.md) [default: built with `cargo build -p
#               idgen-testkit --bin idgen-fake-nodes` into <repo>/target/debug]; the scenario
#               runner (scenarios_test.go) FAILS if it is missing
#   GO          the go command [default: go]
#
# The failover and lease tests start an etcd (`etcd` on PATH, Debian's etcd-server).
# Exits non-zero on any failure; prints a summary line last.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export IDGEN_BIN="${IDGEN_BIN:-$repo/target/debug/idgen}"
go="${GO:-go}"
export GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local

tmp="$(mktemp -d "${TMPDIR:-/tmp}/idgen-goclient.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "==> $("$go" version)"
echo "==> IDGEN_BIN=$IDGEN_BIN"
echo "==> test certificates in $tmp/certs"
bash "$repo/clients/test-certs.sh" "$tmp/certs"
export IDGEN_TEST_CERTS="$tmp/certs"
if [ -z "${IDGEN_FAKE_NODES_BIN:-}" ]; then
  (cd "$repo" && cargo build --quiet -p idgen-testkit --bin idgen-fake-nodes)
  IDGEN_FAKE_NODES_BIN="$repo/target/debug/idgen-fake-nodes"
fi
export IDGEN_FAKE_NODES_BIN
echo "==> IDGEN_FAKE_NODES_BIN=$IDGEN_FAKE_NODES_BIN"

cd "$here"
echo "==> go vet ./..."
"$go" vet ./...
echo "==> go build ./..."
"$go" build -o "$tmp/idgen-bench" ./cmd/idgen-bench

race=()
race_note="race detector off (not supported by this toolchain)"
if "$go" test -race -run '^$' . >/dev/null 2>&1; then
  race=(-race)
  race_note="race detector on"
fi
echo "==> go test ${race[*]} -count=1 -v ./... ($race_note)"
set +e
"$go" test "${race[@]}" -count=1 -v -timeout 15m ./... 2>&1 | tee "$tmp/test.log"
status=${PIPESTATUS[0]}
set -e

passed=$(grep -cE '^\s*--- PASS: ' "$tmp/test.log" || true)
failed=$(grep -cE '^\s*--- FAIL: ' "$tmp/test.log" || true)
top=$(grep -cE '^--- (PASS|FAIL): ' "$tmp/test.log" || true)
echo
if [ "$status" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$passed" -eq 0 ]; then
  echo "go client: tests FAILED — $passed passed, $failed failed ($top tests with their subtests counted separately: $((passed + failed))), $race_note" >&2
  exit 1
fi
echo "go client: $top tests passed ($passed with subtests), 0 failed, $race_note — OK"
