#!/usr/bin/env bash
# Smoke test of the release jar (called by release/smoke.sh): puts dist/'s jar and POM into a
# fresh local Maven repository as dev.fencelock:fencelock:V, lets Maven resolve a consumer's
# class path from that POM alone (its declared dependencies come from Maven Central), and runs
# release/smoke/Lock.java on it: the jar must lock on SQLite with nothing but what it declares.
#
#   bindings/jvm/release-smoke.sh --dist DIST --version V --work EMPTY_DIR
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dist="" version="" work=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dist) dist="$2"; shift 2 ;;
        --version) version="$2"; shift 2 ;;
        --work) work="$2"; shift 2 ;;
        *) echo "bindings/jvm/release-smoke.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$dist" ] && [ -n "$version" ] && [ -n "$work" ] ||
    { echo "usage: release-smoke.sh --dist DIST --version V --work DIR" >&2; exit 2; }

# A repository is a folder layout: the jar and POM placed where Maven looks for the coordinates.
repo="$work/repository"
coordinates="$repo/dev/fencelock/fencelock/$version"
mkdir -p "$coordinates" "$work/consumer" "$work/classes"
cp "$dist/fencelock-jvm-$version.jar" "$coordinates/fencelock-$version.jar"
cp "$dist/fencelock-jvm-$version.pom" "$coordinates/fencelock-$version.pom"

cat > "$work/consumer/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>smoke</groupId>
  <artifactId>consumer</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>dev.fencelock</groupId>
      <artifactId>fencelock</artifactId>
      <version>$version</version>
    </dependency>
  </dependencies>
</project>
POM
mvn -B -q -f "$work/consumer/pom.xml" -Dmaven.repo.local="$repo" \
    dependency:build-classpath -Dmdep.outputFile="$work/classpath.txt" >/dev/null
classpath="$(cat "$work/classpath.txt")"
echo "   class path from the POM: $(tr ':' '\n' < "$work/classpath.txt" | xargs -n1 basename | tr '\n' ' ')"

javac -d "$work/classes" -cp "$classpath" "$root/release/smoke/Lock.java"
# JNA unpacks the native library from the jar into its own temporary folder.
(cd "$work" && env -i HOME="$work" PATH="/usr/bin:/bin" \
    java -Djna.tmpdir="$work" -cp "$work/classes:$classpath" Lock)
