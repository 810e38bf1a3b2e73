#!/usr/bin/env bash
# Builds the Java client, its jar (checked: module name dev.idgen.client, the library's classes
# only), the bench program (src/bench) and its JUnit 5 suite with plain javac (Java 17, JUnit
# from Debian's jars in /usr/share/java: no Maven or Gradle, works offline) and runs the suite,
# against the jar, with real idgen nodes.
#
#   IDGEN_BIN   the server binary [default: <repo>/target/debug/idgen]; the suite FAILS if
#               it is missing (build it with `cargo build -p idgen`)
#   IDGEN_TEST_CERTS_BIN  the test kit's certificate writer [default: built and run with
#               `cargo run -p idgen-testkit --bin idgen-test-certs`]; the TLS tests use the
#               certificates it writes into the temporary directory (never committed ones)
#   IDGEN_FAKE_NODES_BIN  the test kit's fake nodes of the shared behaviour scenarios
#               (clients/vectors/SCENARIOS.md; ScenariosTest) [default: built with `cargo build
#               -q -p idgen-testkit --bin idgen-fake-nodes` into <repo>/target/debug]; the
#               scenarios FAIL if it is missing
#   JUNIT_DIR   where the JUnit jars are [default: /usr/share/java]
#   JAVA_HOME   the JDK to use [default: javac and java on PATH]
#
# Exits non-zero on any failure; prints the summary line last.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export IDGEN_BIN="${IDGEN_BIN:-$repo/target/debug/idgen}"
export IDGEN_REPO="$repo"
junit="${JUNIT_DIR:-/usr/share/java}"
if [ -n "${JAVA_HOME:-}" ]; then
  javac="$JAVA_HOME/bin/javac"; java="$JAVA_HOME/bin/java"
else
  javac=javac; java=java
fi

for jar in junit-jupiter-api junit-jupiter-engine junit-jupiter-params junit-platform-console-standalone \
           opentest4j apiguardian-api; do
  if [ ! -f "$junit/$jar.jar" ]; then
    echo "java client: $junit/$jar.jar is missing (Debian: junit5; scripts/deps java)" >&2
    exit 1
  fi
done
api_cp="$junit/junit-jupiter-api.jar:$junit/junit-jupiter-params.jar:$junit/opentest4j.jar:$junit/apiguardian-api.jar:$junit/junit-platform-commons.jar"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/idgen-javaclient.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "==> javac ($("$javac" -version 2>&1)) main sources"
find "$here/src/main/java" -name '*.java' > "$tmp/main.txt"
"$javac" --release 17 -Xlint:all -Werror -d "$tmp/classes" @"$tmp/main.txt"
echo "==> javac bench sources (src/bench: programs beside the library, never in its jar)"
find "$here/src/bench/java" -name '*.java' > "$tmp/bench.txt"
"$javac" --release 17 -Xlint:all -Werror -d "$tmp/bench-classes" -cp "$tmp/classes" @"$tmp/bench.txt"

# The library jar as the README builds it: the main classes only, named as a module by the
# manifest (the same name as pom.xml gives Maven's jar), so users on the module path can
# `requires dev.idgen.client` rather than a name derived from the file's.
echo "==> jar"
jar="${JAVA_HOME:+$JAVA_HOME/bin/}jar"
"$jar" --create --file "$tmp/idgen-client.jar" --manifest "$here/MANIFEST.MF" -C "$tmp/classes" .
module="$("$jar" --describe-module --file "$tmp/idgen-client.jar" | sed -n 's/^\([^ ]*\) automatic$/\1/p')"
manifest_name="$(sed -n 's/^Automatic-Module-Name: *//p' "$here/MANIFEST.MF")"
pom_name="$(sed -n 's:.*<Automatic-Module-Name>\(.*\)</Automatic-Module-Name>.*:\1:p' "$here/pom.xml")"
if [ "$module" != "dev.idgen.client" ] || [ "$manifest_name" != "$module" ] || [ "$pom_name" != "$module" ]; then
  echo "java client: the jar's module is '$module' (MANIFEST.MF '$manifest_name', pom.xml '$pom_name'), not dev.idgen.client" >&2
  exit 1
fi
strays="$("$jar" --list --file "$tmp/idgen-client.jar" | grep -v -e '^META-INF/$' -e '^META-INF/MANIFEST.MF$' \
  -e '^dev/$' -e '^dev/idgen/$' -e '^dev/idgen/client/$' -e '^dev/idgen/client/[A-Za-z0-9$]*\.class$' || true)"
if [ -n "$strays" ] || "$jar" --list --file "$tmp/idgen-client.jar" | grep -q 'Bench'; then
  echo "java client: the library jar holds more than the library's classes:" >&2
  echo "$strays" >&2
  exit 1
fi
# What a repository needs from a published pom (Maven Central's list).
for tag in name description url licenses scm developers; do
  if ! grep -q "^  <$tag>" "$here/pom.xml"; then
    echo "java client: pom.xml has no <$tag>" >&2
    exit 1
  fi
done
echo "jar: module $module, $("$jar" --list --file "$tmp/idgen-client.jar" | grep -c '\.class$') classes, no bench"

echo "==> javac test sources"
find "$here/src/test/java" -name '*.java' > "$tmp/test.txt"
"$javac" --release 17 -Xlint:all,-try -d "$tmp/test-classes" -cp "$tmp/classes:$api_cp" @"$tmp/test.txt"

echo "==> IDGEN_BIN=$IDGEN_BIN"
echo "==> test certificates in $tmp/certs"
bash "$repo/clients/test-certs.sh" "$tmp/certs"
export IDGEN_TEST_CERTS="$tmp/certs"
if [ -z "${IDGEN_FAKE_NODES_BIN:-}" ]; then
  (cd "$repo" && cargo build -q -p idgen-testkit --bin idgen-fake-nodes)
  IDGEN_FAKE_NODES_BIN="$repo/target/debug/idgen-fake-nodes"
fi
export IDGEN_FAKE_NODES_BIN
echo "==> IDGEN_FAKE_NODES_BIN=$IDGEN_FAKE_NODES_BIN (the behaviour scenarios' fake nodes)"

echo "==> junit"
set +e
"$java" -jar "$junit/junit-platform-console-standalone.jar" \
  --class-path "$tmp/idgen-client.jar:$tmp/test-classes" --scan-class-path "$tmp/test-classes" \
  --include-engine junit-jupiter --disable-banner --disable-ansi-colors --details=tree \
  --fail-if-no-tests 2>&1 | tee "$tmp/junit.log"
status=${PIPESTATUS[0]}
set -e

found="$(sed -n 's/^\[ *\([0-9]*\) tests found *\]$/\1/p' "$tmp/junit.log" | tail -1)"
ok="$(sed -n 's/^\[ *\([0-9]*\) tests successful *\]$/\1/p' "$tmp/junit.log" | tail -1)"
failed="$(sed -n 's/^\[ *\([0-9]*\) tests failed *\]$/\1/p' "$tmp/junit.log" | tail -1)"
skipped="$(sed -n 's/^\[ *\([0-9]*\) tests skipped *\]$/\1/p' "$tmp/junit.log" | tail -1)"
echo
if [ "$status" -ne 0 ] || [ -z "$ok" ] || [ "${failed:-1}" != "0" ] || [ "${skipped:-1}" != "0" ] || [ "$ok" != "$found" ]; then
  echo "java client: tests FAILED — ${found:-?} found, ${ok:-?} successful, ${failed:-?} failed, ${skipped:-?} skipped" >&2
  echo "java client: ${found:-?} tests, ${ok:-?} successful, ${failed:-?} failed — FAILED"
  exit 1
fi
echo "java client: $found tests, $ok successful, 0 failed — OK"
