#!/usr/bin/env bash
# Builds the Java client's library jar with the JDK's own tools (offline; no Maven or Gradle):
#
#   bash clients/java/build-jar.sh CLASSES_DIR JAR
#
# compiles src/main/java (Java 17, every lint a failure) into CLASSES_DIR (emptied first) and
# packs those classes, and nothing else, into JAR with MANIFEST.MF (Automatic-Module-Name
# dev.idgen.client). The one build of the jar: run_tests.sh runs its suite against it and
# scripts/package checks it as the artifact a user installs. JAVA_HOME picks the JDK [default:
# javac and jar on PATH].
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: bash clients/java/build-jar.sh CLASSES_DIR JAR" >&2; exit 2; }
here="$(cd "$(dirname "$0")" && pwd)"
classes="$1"
out="$2"
bin="${JAVA_HOME:+$JAVA_HOME/bin/}"

rm -rf "$classes"
mkdir -p "$classes" "$(dirname "$out")"
sources="$(mktemp "${TMPDIR:-/tmp}/idgen-java-sources.XXXXXX")"
trap 'rm -f "$sources"' EXIT
find "$here/src/main/java" -name '*.java' >"$sources"
"${bin}javac" --release 17 -Xlint:all -Werror -d "$classes" @"$sources"
rm -f "$out"
"${bin}jar" --create --file "$out" --manifest "$here/MANIFEST.MF" -C "$classes" .
