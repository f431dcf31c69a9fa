#!/usr/bin/env bash
# Builds the JVM library (native library in debug, uniffi-bindgen, Kotlin, Java) and runs its
# JUnit 5 tests (Kotlin and Java) against the test servers.
#
#   bindings/jvm/run-tests.sh [extra mvn args, e.g. -Dtest=BasicsTest]
#
# Environment:
#   FENCELOCK_PROFILE   cargo profile: dev (default here, fast to build) or release
#   CARGO_TARGET_DIR    cargo's target folder (default: the workspace's target/, which under CI is
#                       the folder `cargo test` already filled, so the dependency tree is reused)
#   FENCELOCK_JVM_LIBRARY  test this libfencelock_jvm.so instead of building one (CI tests the
#                       library release/build.sh linked against glibc 2.17, which the jar ships)
#   FENCELOCK_TEST_*_URL, FENCELOCK_REQUIRE_SERVERS   as for every test suite (tests/servers.sh env)
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
    *) echo "FENCELOCK_PROFILE must be dev or release, not $profile" >&2; exit 2 ;;
esac
target_dir="${CARGO_TARGET_DIR:-$here/../../target}"

# The crate's unit tests: its copies of the core's lists (error codes, event kinds) match.
printf '\n== cargo test -p fencelock-jvm --lib\n'
(cd "$here/../.." && cargo test --quiet --target-dir "$target_dir" -p fencelock-jvm --lib)

# test-hooks: entry points that panic on purpose (LostTest); never in a release.
# uniffi-bindgen in a target folder of its own, as bindings/jvm/release.sh and tests/run-all.sh
# build it: one build serves the release's jar and these tests.
native=(-Dcargo.profile="$profile" -Dcargo.profile.dir="$profile_dir" -Dcargo.target.dir="$target_dir"
        -Dcargo.features=test-hooks -Dbindgen.target.dir="$target_dir/bindgen")
what="cargo profile $profile"
if [ -n "${FENCELOCK_JVM_LIBRARY:-}" ]; then
    [ "$(basename "$FENCELOCK_JVM_LIBRARY")" = libfencelock_jvm.so ] && [ -f "$FENCELOCK_JVM_LIBRARY" ] ||
        { echo "FENCELOCK_JVM_LIBRARY must name an existing libfencelock_jvm.so" >&2; exit 1; }
    native=(-Dcargo.build.skip=true -Dcargo.target.dir="$(cd "$(dirname "$FENCELOCK_JVM_LIBRARY")" && pwd)"
            -Dcargo.profile.dir=. -Dbindgen.target.dir="$target_dir/bindgen")
    what="$FENCELOCK_JVM_LIBRARY"
fi

rm -rf "$here/target/surefire-reports"
printf '\n== mvn test (native library: %s)\n' "$what"
mvn -B -q -f pom.xml "${native[@]}" \
    -Dsurefire.failIfNoSpecifiedTests=false \
    test "$@"

# Surefire's own summary is quiet under -q: count from its reports, and fail on none.
python3 - "$here/target/surefire-reports" <<'PY'
import glob, sys, xml.etree.ElementTree as ET
tests = failed = skipped = 0
for f in glob.glob(sys.argv[1] + "/TEST-*.xml"):
    r = ET.parse(f).getroot()
    tests += int(r.get("tests", 0))
    failed += int(r.get("failures", 0)) + int(r.get("errors", 0))
    skipped += int(r.get("skipped", 0))
if tests == 0:
    print("no JVM test ran", file=sys.stderr)
    sys.exit(1)
print(f"JVM: {tests - failed - skipped} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
PY
