#!/usr/bin/env bash
# Builds the Java client's jar (build-jar.sh), the bench program (src/bench) and its JUnit 5
# suite with plain javac (Java 17, JUnit from Debian's jars in /usr/share/java: no Maven or
# Gradle, works offline) and runs the suite, against the jar, with real idgen nodes. The jar as
# an artifact (its module name, its classes, the sources and javadoc jars, pom.xml) is checked
# by scripts/package.
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

# The library jar, built as scripts/package builds it: the suite runs against it.
echo "==> javac ($("$javac" -version 2>&1)) main sources; jar"
bash "$here/build-jar.sh" "$tmp/classes" "$tmp/idgen-client.jar"
echo "==> javac bench sources (src/bench: programs beside the library, never in its jar)"
find "$here/src/bench/java" -name '*.java' > "$tmp/bench.txt"
"$javac" --release 17 -Xlint:all -Werror -d "$tmp/bench-classes" -cp "$tmp/classes" @"$tmp/bench.txt"

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
