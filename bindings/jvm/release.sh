#!/usr/bin/env bash
# Packages the JVM library for a release (called by release/build.sh):
#
#   bindings/jvm/release.sh --version V --library PATH/libfencelock_jvm.so --out DIST
#
# writes DIST/fencelock-jvm-V.jar (Kotlin/Java classes, the generated uniffi layer and the given
# native library under linux-x86-64/, where JNA looks), its -sources and -javadoc jars, and
# DIST/fencelock-jvm-V.pom, the POM a repository would publish as dev.fencelock:fencelock:V
# (flatten-maven-plugin: coordinates and dependencies, without the build, which needs cargo);
# the same four files for each module, fencelock-shedlock-V* and fencelock-spring-V*.
#
# The library is the one release/build.sh linked with zig against glibc 2.17; Maven does not run
# cargo for it here. uniffi-bindgen still runs (from target/bindgen/, built once in profile ci,
# by tests/run-all.sh beside the Rust tests in CI, else here): it reads the library's metadata
# to generate the Kotlin layer that matches it.
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
# The release profile adds the -sources and -javadoc jars and the flattened POM (pom.xml); install
# puts the library where the modules' builds below find it.
mvn -B -q -f "$here/pom.xml" install -Prelease -Dmaven.test.skip=true \
    -Drevision="$version" \
    -Dcargo.build.skip=true \
    -Dcargo.target.dir="$stage" -Dcargo.profile.dir=native \
    -Dbindgen.target.dir="$root/target/bindgen" \
    -Djvm.build.dir="$stage/build"

# The modules on top of it, Java only.
for module in shedlock spring; do
    mvn -B -q -f "$here/$module/pom.xml" package -Prelease -Dmaven.test.skip=true \
        -Drevision="$version"
done

# dist/: each artifact as fencelock-jvm-V*.jar (the library) or fencelock-MODULE-V*.jar, with its
# -sources and -javadoc jars and the POM a repository would publish.
copy_artifact() {  # build folder, artifact id in the build, name in dist
    local build="$1" artifact="$2" name="$3" suffix
    for suffix in "" -sources -javadoc; do
        cp "$build/$artifact-$version$suffix.jar" "$out/$name-$version$suffix.jar"
    done
    cp "$build/.flattened-pom.xml" "$out/$name-$version.pom"
}
copy_artifact "$stage/build" fencelock fencelock-jvm
copy_artifact "$here/shedlock/target" fencelock-shedlock fencelock-shedlock
copy_artifact "$here/spring/target" fencelock-spring fencelock-spring

jar="$out/fencelock-jvm-$version.jar"
listing="$(unzip -l "$jar")"  # whole, not piped: grep -q would cut unzip short (pipefail)
grep -q 'linux-x86-64/libfencelock_jvm.so' <<<"$listing" ||
    { echo "bindings/jvm/release.sh: the jar has no native library" >&2; exit 1; }
listing="$(unzip -l "$out/fencelock-jvm-$version-sources.jar")"
grep -q 'dev/fencelock/Locker.kt' <<<"$listing" ||
    { echo "bindings/jvm/release.sh: the sources jar has no Kotlin sources" >&2; exit 1; }
listing="$(unzip -l "$out/fencelock-jvm-$version-javadoc.jar")"
grep -q 'index.html' <<<"$listing" ||
    { echo "bindings/jvm/release.sh: the javadoc jar has no pages" >&2; exit 1; }
for pom in "$out"/fencelock-{jvm,shedlock,spring}-"$version".pom; do
    grep -q "<version>$version</version>" "$pom" && ! grep -q '<build>' "$pom" ||
        { echo "bindings/jvm/release.sh: $pom is not a flattened POM of $version" >&2; exit 1; }
done
echo "   fencelock-{jvm,shedlock,spring}-$version{,-sources,-javadoc}.jar and their POMs"
