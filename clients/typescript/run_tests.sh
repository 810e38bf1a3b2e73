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
# Installs the dev dependencies with `npm ci` (from package-lock.json; offline from npm's cache
# when the registry is unreachable), builds with `tsc`, runs `npm test`. Exits non-zero on any
# failure; prints a summary line last.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export IDGEN_BIN="${IDGEN_BIN:-$repo/target/debug/idgen}"
cd "$here"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/idgen-tsclient.XXXXXX")"
node_pid=""
cleanup() {
  if [ -n "$node_pid" ]; then kill "$node_pid" 2>/dev/null || true; wait "$node_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

echo "==> node $(node --version), npm $(npm --version)"
if [ -f package-lock.json ]; then
  echo "==> npm ci"
  npm ci --no-audit --no-fund --prefer-offline >"$tmp/npm.log" 2>&1 || { cat "$tmp/npm.log" >&2; exit 1; }
else
  echo "==> npm install (no package-lock.json)"
  npm install --no-audit --no-fund >"$tmp/npm.log" 2>&1 || { cat "$tmp/npm.log" >&2; exit 1; }
fi

echo "==> npm run build"
npm run --silent build

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

# The package as a user installs it: `npm pack` (what `files` lets in), installed from the
# tarball into an empty project, loaded with require() and with import, an ID taken from a
# real node each way, and both type entry points checked with tsc.
echo "==> npm pack; the tarball installed into an empty project: require(), import, types"
pkg="$tmp/package"
mkdir -p "$pkg/project" "$pkg/node"
npm pack --ignore-scripts --pack-destination "$pkg" >"$pkg/pack.log" 2>&1 || { cat "$pkg/pack.log" >&2; exit 1; }
tarball="$(echo "$pkg"/idgen-client-*.tgz)"
tar -tzf "$tarball" | sort >"$pkg/contents"
for f in dist/index.js dist/index.d.ts dist/cjs/index.js dist/cjs/index.d.ts dist/cjs/package.json README.md LICENSE; do
  grep -qx "package/$f" "$pkg/contents" || { echo "package: $f missing from the tarball" >&2; cat "$pkg/contents" >&2; exit 1; }
done
if grep -E 'bench|/test/|\.map$' "$pkg/contents" >&2; then
  echo "package: benchmark, test or source-map files in the tarball (package.json files)" >&2
  exit 1
fi
# What `files` lets in, as npm reports it before packing: the builds and the docs, no benchmark,
# test or source-map file.
npm pack --dry-run --json --ignore-scripts >"$pkg/dry-run.json" 2>"$pkg/dry-run.log" || { cat "$pkg/dry-run.log" >&2; exit 1; }
node -e '
const files = JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8"))[0].files.map((f) => f.path);
const bad = files.filter((f) => /bench|(^|\/)test(s)?\/|\.test\.|\.map$|^src\//.test(f));
if (bad.length > 0) { console.error("npm pack --dry-run: files that must not ship: " + bad.join(", ")); process.exit(1); }
for (const f of ["dist/index.js", "dist/cjs/index.js", "dist/opentelemetry.js", "dist/cjs/opentelemetry.js", "package.json", "README.md", "LICENSE"]) {
  if (!files.includes(f)) { console.error("npm pack --dry-run: " + f + " missing"); process.exit(1); }
}
console.log("    npm pack --dry-run: " + files.length + " files, no benchmark, test or source map");
' "$pkg/dry-run.json"
cp test-package/require.cjs test-package/import.mjs test-package/types.cts test-package/types.mts "$pkg/project/"
printf '{ "name": "idgen-client-consumer", "private": true }\n' >"$pkg/project/package.json"
(cd "$pkg/project" && npm install --no-audit --no-fund --prefer-offline "$tarball") >"$pkg/install.log" 2>&1 \
  || { cat "$pkg/install.log" >&2; exit 1; }
for resolution in nodenext node16; do
  "$here/node_modules/.bin/tsc" --noEmit --strict --module "$resolution" --moduleResolution "$resolution" --target es2022 \
    --typeRoots "$here/node_modules/@types" --types node "$pkg/project/types.cts" "$pkg/project/types.mts"
done
"$IDGEN_BIN" serve --listen 127.0.0.1:0 --admin-listen off --http-listen off --store memory \
  --data-dir "$pkg/node" >"$pkg/node.log" 2>&1 &
node_pid=$!
addr=""
for _ in $(seq 1 100); do # bounded: 10 s
  addr="$(sed -n 's/^listening on //p' "$pkg/node.log" | head -1)"
  [ -n "$addr" ] && break
  kill -0 "$node_pid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$addr" ] || { echo "package: idgen serve did not listen; log:" >&2; cat "$pkg/node.log" >&2; exit 1; }
required="$(cd "$pkg/project" && timeout 30 node require.cjs "$addr")"
imported="$(cd "$pkg/project" && timeout 30 node import.mjs "$addr")"
kill "$node_pid"; wait "$node_pid" 2>/dev/null || true; node_pid=""
if [ -z "$required" ] || [ -z "$imported" ] || [ "$required" = "$imported" ]; then
  echo "package: expected two distinct IDs, got require() '$required', import '$imported'" >&2
  exit 1
fi
echo "    require(): $required; import: $imported"

# With the optional peer dependency installed (as a user of the adapter would), the
# OpenTelemetry entry point loads both ways and its types resolve.
api_version="$(node -p 'require("./node_modules/@opentelemetry/api/package.json").version')"
cp test-package/otel.cjs test-package/otel.mjs test-package/otel-types.cts test-package/otel-types.mts "$pkg/project/"
(cd "$pkg/project" && npm install --no-audit --no-fund --prefer-offline "@opentelemetry/api@$api_version") >"$pkg/install-otel.log" 2>&1 \
  || { cat "$pkg/install-otel.log" >&2; exit 1; }
otel="$(cd "$pkg/project" && node otel.cjs && node otel.mjs)"
[ "$otel" = "$(printf 'require\nimport')" ] || { echo "package: the OpenTelemetry entry point: '$otel'" >&2; exit 1; }
for resolution in nodenext node16; do
  "$here/node_modules/.bin/tsc" --noEmit --strict --module "$resolution" --moduleResolution "$resolution" --target es2022 \
    --typeRoots "$here/node_modules/@types" --types node "$pkg/project/otel-types.cts" "$pkg/project/otel-types.mts"
done
echo "    idgen-client/opentelemetry with @opentelemetry/api $api_version: require(), import, types"

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
