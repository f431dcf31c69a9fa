#!/usr/bin/env bash
# Packages the JVM library for a release (called by release/build.sh):
#
#   bindings/jvm/release.sh --version V --library PATH/libfencelock_jvm.so --out DIST
#
# writes DIST/fencelock-jvm-V.jar (Kotlin/Java classes, the generated uniffi layer and the given
# native library under linux-x86-64/, where JNA looks) and DIST/fencelock-jvm-V.pom, the POM a
# repository would publish as dev.fencelock:fencelock:V: coordinates and the runtime
# dependencies, without the build (which needs cargo).
#
# The library is the one release/build.sh linked with zig against glibc 2.17; Maven does not run
# cargo for it here. uniffi-bindgen still runs (from target/bindgen/, built once in debug, by
# tests/run-all.sh beside the conformance suite in CI, else here): it reads the library's
# metadata to generate the Kotlin layer that matches it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

version="" library="" out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --version) version="$2"; shift 2 ;;
        --library) library="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        *) echo "bindings/jvm/release.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ -z "$version" ] || [ ! -f "$library" ] || [ ! -d "$out" ]; then
    echo "usage: bindings/jvm/release.sh --version V --library FILE.so --out EXISTING_DIR" >&2
    exit 2
fi

if ! command -v mvn >/dev/null || ! command -v javac >/dev/null; then
    apt-get install -y -q maven openjdk-17-jdk-headless >/dev/null
fi

# The library alone in a folder of its own: the pom packages "<cargo.target.dir>/<profile dir>/
# libfencelock_jvm.so", and nothing else may be picked up beside it.
stage="$root/target/dist-jvm"
rm -rf "$stage"
mkdir -p "$stage/native"
cp "$library" "$stage/native/libfencelock_jvm.so"

# maven.test.skip: the tests are neither run nor compiled here (bindings/jvm/run-tests.sh does both).
mvn -B -q -f "$here/pom.xml" package -Dmaven.test.skip=true \
    -Drevision="$version" \
    -Dcargo.build.skip=true \
    -Dcargo.target.dir="$stage" -Dcargo.profile.dir=native \
    -Dbindgen.target.dir="$root/target/bindgen" \
    -Djvm.build.dir="$stage/build"

jar="$out/fencelock-jvm-$version.jar"
cp "$stage/build/fencelock-$version.jar" "$jar"
listing="$(unzip -l "$jar")"  # whole, not piped: grep -q would cut unzip short (pipefail)
grep -q 'linux-x86-64/libfencelock_jvm.so' <<<"$listing" ||
    { echo "bindings/jvm/release.sh: the jar has no native library" >&2; exit 1; }

# The published POM: the project's coordinates and its compile/runtime dependencies with their
# versions resolved, nothing of the build.
python3 - "$here/pom.xml" "$version" > "$out/fencelock-jvm-$version.pom" <<'PY'
import re, sys
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape

ns = {"m": "http://maven.apache.org/POM/4.0.0"}
project = ET.parse(sys.argv[1]).getroot()
version = sys.argv[2]
props = {p.tag.split("}")[1]: (p.text or "") for p in project.find("m:properties", ns)}
props["revision"] = version

def text(node, tag):
    found = node.find(f"m:{tag}", ns)
    value = found.text if found is not None else None
    if value is None:
        return None
    return escape(re.sub(r"\$\{([^}]+)\}", lambda m: props[m.group(1)], value.strip()))

deps = []
for dep in project.find("m:dependencies", ns):
    scope = text(dep, "scope") or "compile"
    if scope in ("test", "provided", "system"):
        continue
    deps.append((text(dep, "groupId"), text(dep, "artifactId"), text(dep, "version"), scope, text(dep, "optional") == "true"))

print('<?xml version="1.0" encoding="UTF-8"?>')
print('<project xmlns="http://maven.apache.org/POM/4.0.0" '
      'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
      'xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 https://maven.apache.org/xsd/maven-4.0.0.xsd">')
print("  <modelVersion>4.0.0</modelVersion>")
for tag in ("groupId", "artifactId"):
    print(f"  <{tag}>{text(project, tag)}</{tag}>")
print(f"  <version>{version}</version>")
print("  <packaging>jar</packaging>")
for tag in ("name", "description"):
    print(f"  <{tag}>{text(project, tag)}</{tag}>")
print("  <dependencies>")
for group, artifact, dep_version, scope, optional in deps:
    print("    <dependency>")
    print(f"      <groupId>{group}</groupId>")
    print(f"      <artifactId>{artifact}</artifactId>")
    print(f"      <version>{dep_version}</version>")
    if scope != "compile":
        print(f"      <scope>{scope}</scope>")
    if optional:
        # Not passed on to users (OpenTelemetry's API, for metrics): they add it to turn metrics on.
        print("      <optional>true</optional>")
    print("    </dependency>")
print("  </dependencies>")
print("</project>")
PY
echo "   $(basename "$jar"), fencelock-jvm-$version.pom"
