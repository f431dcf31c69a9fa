#!/usr/bin/env bash
# Builds the JVM library (native library in debug, uniffi-bindgen, Kotlin, Java) and runs its
# JUnit 5 tests (Kotlin and Java) against the test servers.
#
#   bindings/jvm/run-tests.sh [extra mvn args, e.g. -Dtest=BasicsTest]
#
# Environment:
#   FENCELOCK_PROFILE   cargo profile: dev (default here, fast to build), release, or ci (CI:
#                       dependencies unoptimised, as its Rust tests are built)
#   CARGO_TARGET_DIR    cargo's target folder (default: the workspace's target/, which under CI is
#                       the folder `cargo test` already filled, so the dependency tree is reused)
#   FENCELOCK_JVM_LIBRARY  test this libfencelock_jvm.so instead of building one (CI tests the
#                       library release/build.sh linked against glibc 2.17, which the jar ships)
#   FENCELOCK_TEST_*_URL, FENCELOCK_REQUIRE_SERVERS   as for every test suite (tests/servers.sh env)
#   FENCELOCK_TEST_BACKENDS  the backends to test on, comma-separated (CI: sqlite,redis,zookeeper);
#                       unset, every one (CONTRIBUTING.md, "Which tests run where"; Backends.kt)
#
# Needs JDK 17+, Maven 3.8+ and Rust (cargo); Maven fetches Kotlin, JNA, kotlinx-coroutines and
# JUnit from Maven Central. Exits non-zero on any failure, including no test run.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# A path given relative to where the script was called from stays valid after the cd below.
if [ -n "${FENCELOCK_JVM_LIBRARY:-}" ]; then
    FENCELOCK_JVM_LIBRARY="$(realpath "$FENCELOCK_JVM_LIBRARY")"
fi
cd "$here"

if ! command -v mvn >/dev/null || ! command -v javac >/dev/null; then
    # The machine image has them; a bare Debian needs them installed (as root, like CI).
    apt-get install -y -q maven openjdk-17-jdk-headless >/dev/null
fi

profile="${FENCELOCK_PROFILE:-dev}"
case "$profile" in
    dev) profile_dir=debug ;;
    release) profile_dir=release ;;
    ci) profile_dir=ci ;;
    *) echo "FENCELOCK_PROFILE must be dev, release or ci, not $profile" >&2; exit 2 ;;
esac
target_dir="${CARGO_TARGET_DIR:-$here/../../target}"

# The crate's unit tests: its copies of the core's lists (error codes, event kinds) match.
printf '\n== cargo test -p fencelock-jvm --lib\n'
(cd "$here/../.." &&
    cargo test --quiet --profile "$profile" --target-dir "$target_dir" -p fencelock-jvm --lib)

# test-hooks: entry points that panic on purpose (src/test-hooks/kotlin, compiled only with
# -Dcargo.features=test-hooks: the pom's profile test-hooks); never in a release.
# uniffi-bindgen in a target folder of its own, as bindings/jvm/release.sh and tests/run-all.sh
# build it: one build serves the release's jar and these tests.
native=(-Dcargo.profile="$profile" -Dcargo.profile.dir="$profile_dir" -Dcargo.target.dir="$target_dir"
        -Dcargo.features=test-hooks -Dbindgen.target.dir="$target_dir/bindgen")
what="cargo profile $profile"
if [ -n "${FENCELOCK_JVM_LIBRARY:-}" ]; then
    [ "$(basename "$FENCELOCK_JVM_LIBRARY")" = libfencelock_jvm.so ] && [ -f "$FENCELOCK_JVM_LIBRARY" ] ||
        { echo "FENCELOCK_JVM_LIBRARY must name an existing libfencelock_jvm.so" >&2; exit 1; }
    # cargo does not run; the property says the library has the test hooks, as CI's
    # `release/build.sh --profile ci` builds it, so their tests are compiled too.
    native=(-Dcargo.build.skip=true -Dcargo.target.dir="$(cd "$(dirname "$FENCELOCK_JVM_LIBRARY")" && pwd)"
            -Dcargo.profile.dir=. -Dcargo.features=test-hooks -Dbindgen.target.dir="$target_dir/bindgen")
    what="$FENCELOCK_JVM_LIBRARY"
fi

rm -rf "$here/target/surefire-reports"
printf '\n== mvn test (native library: %s)\n' "$what"
mvn -B -q -f pom.xml "${native[@]}" \
    -Dsurefire.failIfNoSpecifiedTests=false \
    test "$@"

# Virtual threads need JDK 21 or later, and the library's minimum is 17, which the run above used:
# VirtualThreadTest runs again on the first JDK 21+ found (FENCELOCK_JDK21_HOME, JAVA_HOME, then
# /usr/lib/jvm/*, where the machine image keeps a Temurin 25), with one carrier thread, so a
# virtual thread that held its carrier while it waits would starve the others.
jdk21=""
for home in ${FENCELOCK_JDK21_HOME:-} ${JAVA_HOME:-} /usr/lib/jvm/*; do
    [ -x "$home/bin/java" ] || continue
    feature="$("$home/bin/java" -XshowSettings:properties -version 2>&1 |
        sed -n 's/^ *java.specification.version = //p')"
    if [ "${feature%%.*}" -ge 21 ] 2>/dev/null; then jdk21="$home"; break; fi
done
if [ -n "$jdk21" ]; then
    printf '\n== mvn surefire:test -Dtest=VirtualThreadTest on %s (one carrier thread)\n' "$jdk21"
    mvn -B -q -f pom.xml "${native[@]}" -Djvm="$jdk21/bin/java" -Dtest=VirtualThreadTest \
        -DargLine="--enable-native-access=ALL-UNNAMED -Djdk.virtualThreadScheduler.parallelism=1 -Djdk.virtualThreadScheduler.maxPoolSize=1" \
        surefire:test
elif [ "${CI:-}" = true ] || [ "${FENCELOCK_REQUIRE_SERVERS:-}" = 1 ]; then
    echo "no JDK 21 or later found for VirtualThreadTest (set FENCELOCK_JDK21_HOME)" >&2
    exit 1
else
    echo "warning: no JDK 21 or later found: VirtualThreadTest ran skipped on $(java -version 2>&1 | head -1)" >&2
fi

# The modules on top of the library (fencelock-shedlock, fencelock-spring) build against the jar
# just tested: it and its test jar (the modules' tests reuse its backend list) go to the local
# repository first.
printf '\n== mvn install of the library jar, then the modules fencelock-shedlock and fencelock-spring\n'
mvn -B -q -f pom.xml "${native[@]}" jar:jar jar:test-jar install:install
for module in shedlock spring; do
    rm -rf "$here/$module/target/surefire-reports"
    mvn -B -q -f "$module/pom.xml" -Dsurefire.failIfNoSpecifiedTests=false test "$@"
done

# Surefire's own summary is quiet under -q: count from its reports, and fail on none.
python3 - "$here" "$jdk21" <<'PY'
import glob, sys, xml.etree.ElementTree as ET
tests = failed = skipped = 0
for f in glob.glob(sys.argv[1] + "/target/surefire-reports/TEST-*.xml") + glob.glob(
    sys.argv[1] + "/*/target/surefire-reports/TEST-*.xml"
):
    r = ET.parse(f).getroot()
    tests += int(r.get("tests", 0))
    failed += int(r.get("failures", 0)) + int(r.get("errors", 0))
    skipped += int(r.get("skipped", 0))
if tests == 0:
    print("no JVM test ran", file=sys.stderr)
    sys.exit(1)
print(f"JVM: {tests - failed - skipped} passed, {failed} failed, {skipped} skipped")
if sys.argv[2]:
    # The second run's report replaced the first's: on JDK 21+ none of it may be skipped.
    r = ET.parse(sys.argv[1] + "/target/surefire-reports/TEST-dev.fencelock.VirtualThreadTest.xml").getroot()
    if int(r.get("tests", 0)) == 0 or int(r.get("skipped", 0)):
        print("VirtualThreadTest did not run on " + sys.argv[2], file=sys.stderr)
        sys.exit(1)
sys.exit(1 if failed else 0)
PY
