#!/usr/bin/env bash
# Installs the TypeScript client's dev dependencies and builds it, from scratch:
#
#   bash clients/typescript/build.sh
#
# `npm ci` (from package-lock.json; offline from npm's cache when the registry is unreachable),
# then `npm run build` into an emptied dist/ (so no file of an earlier build is left to be
# tested or packed). The one build of the client: run_tests.sh tests it and scripts/package
# packs it. Prints npm's log only on failure.
set -euo pipefail

cd "$(dirname "$0")"
log="$(mktemp "${TMPDIR:-/tmp}/idgen-ts-build.XXXXXX")"
trap 'rm -f "$log"' EXIT

echo "==> node $(node --version), npm $(npm --version)"
if [ -f package-lock.json ]; then
  echo "==> npm ci"
  npm ci --no-audit --no-fund --prefer-offline >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
else
  echo "==> npm install (no package-lock.json)"
  npm install --no-audit --no-fund >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
fi
echo "==> npm run build"
rm -rf dist
npm run --silent build
