#!/usr/bin/env bash
# Runs every test of every language: the README's "run every test" command, and what
# .ci/run calls. Works on a fresh machine: it installs and starts what the tests need.
set -euo pipefail
cd "$(dirname "$0")/.."

section() { printf '\n=== %s ===\n' "$*"; }

# Each step with a time limit (seconds, about three times what it takes on a 2-core machine) and
# no controlling terminal: a hang fails with what was running (tests/step.sh).
step() { bash tests/step.sh "$@"; }

# A test profile with dependencies at a low opt level keeps the 2-core build short.
export CARGO_TERM_COLOR=never

section "Lint: formatting and lint of every language (tests/lint.sh; tests/lint.sh --fix repairs)"
# First: a formatting or lint failure costs minutes here, not the whole run.
# Its check of the core with each backend feature alone runs later, beside the core's tests.
step 900 bash tests/lint.sh --skip-backend-features

section "Test servers (Debian packages, loopback)"
bash tests/servers.sh start redis redlock cluster postgres mariadb zookeeper zk-ensemble zk-follower
set -a
eval "$(bash tests/servers.sh env)"
set +a
# Every server was started above: a test that cannot reach one fails instead of skipping.
export FENCELOCK_REQUIRE_SERVERS=1

section "Rust: core and the fencelock command"
# default-members: the crates that need no Python, Node or JDK. Every test binary of the core
# but the conformance suite, then the suite alone: its tests wait on servers, not on the CPU, so
# it runs four at a time instead of the two libtest gives a 2-core machine. Every single-file
# binary of core/tests is named, so a new one runs without an edit here. Beside the suite, each
# into a log printed after it: redlock_faults (a minute of restarts and abstentions on five
# masters of its own, nearly idle) and the command's tests (they mostly wait on the processes
# they start; they use the shared servers, which the suite never restarts, unlike the core's
# *_faults tests before it). The build of uniffi-bindgen for the release step runs beside
# every test of this section.
core_tests=()
for file in core/tests/*.rs; do
    [[ $(basename "$file") == redlock_faults.rs ]] || core_tests+=(--test "$(basename "$file" .rs)")
done
step 1800 cargo test --no-run -q -p fencelock --lib --examples "${core_tests[@]}"
# uniffi-bindgen, which the JVM jar of the release step runs (built once, in debug): three
# minutes of compiling there, here on the cores that the tests below leave idle while they wait
# on servers. In a target folder of its own (bindings/jvm/release.sh looks there), so that its
# build never holds the lock of target/ that every cargo command below takes when it starts.
beside_bindgen=target/bindgen_build.log
step 900 nice -n 10 cargo build -q -p fencelock-jvm-bindgen --target-dir target/bindgen \
    >"$beside_bindgen" 2>&1 &
bindgen_build=$!
# Cargo holds target/'s lock only while it compiles, not while the tests run: the compiles of the
# next tests and lint's check of the core with each backend feature alone (check mode, beside
# clippy's artifacts) use the CPU that the core's tests leave idle, niced below them. About two
# minutes that ran one after the other before (CONTRIBUTING.md, "CI and its budget").
beside_compiles=target/beside_core_tests.log
step 1800 bash -c 'nice -n 15 bash tests/lint.sh backend-features &&
    nice -n 15 cargo test --no-run -q -p fencelock --test conformance --test redlock_faults &&
    nice -n 15 cargo test --no-run -q -p fencelock-cli' >"$beside_compiles" 2>&1 &
compiles=$!
step 1800 cargo test --no-fail-fast -p fencelock --lib --examples "${core_tests[@]}"
wait "$compiles" || { cat "$beside_compiles"; echo "failed beside the core's tests"; exit 1; }
cat "$beside_compiles"
step 300 cargo test -p fencelock --doc
beside_redlock=target/redlock_faults.log beside_cli=target/cli_tests.log
step 600 cargo test -p fencelock --test redlock_faults >"$beside_redlock" 2>&1 &
redlock_faults=$!
step 900 cargo test --no-fail-fast -p fencelock-cli >"$beside_cli" 2>&1 &
cli_tests=$!
step 900 cargo test -p fencelock --test conformance -- --test-threads 4
failed=()
wait "$redlock_faults" || failed+=(redlock_faults)
wait "$cli_tests" || failed+=("the command's tests")
wait "$bindgen_build" || { cat "$beside_bindgen"; failed+=("the build of uniffi-bindgen"); }
echo "--- redlock_faults, run beside it:"
cat "$beside_redlock"
echo "--- the command's tests (cargo test -p fencelock-cli), run beside it:"
cat "$beside_cli"
[[ ${#failed[@]} == 0 ]] || { echo "failed beside the conformance suite: ${failed[*]}"; exit 1; }
# The Redis lock tests with every script sent twice (the test-only duplicate-scripts build)
# run in the soak (tests/faults/run.sh soak), outside CI's 30 minutes.

section "Release artifacts: build (zig, glibc 2.17, profile ci) and smoke tests without Rust"
# The bindings' tests below run on these artifacts instead of building their own: what users
# install is what is tested, and nothing native is built twice. (Profile ci, unoptimised, keeps
# the build within CI's time; a release builds profile dist, the same way.)
step 1200 release/build.sh --profile ci
step 300 release/smoke.sh
version="$(python3 release/version.py)"

section "Python (the release wheel)"
FENCELOCK_WHEEL="$(ls "$PWD"/dist/fencelock-"$version"-*.whl)" step 900 python/run-tests.sh

# The source installs for platforms without a prebuilt artifact (the sdist through pip, the npm
# package without its platform package): 3 minutes of compiling on an idle machine, run niced
# beside the Node and JVM suites, which mostly wait on servers; its log is printed before the
# fault suite, which needs the machine to itself. Not beside the Python suite: its test of a clean
# exit with daemon threads waiting in fencelock crashed once there (a known, open bug of the
# interpreter's shutdown, CHANGELOG), and CPU contention widens that window.
beside_source=target/source_installs.log
FENCELOCK_SOURCE_PROFILE=ci CARGO_TARGET_DIR="$PWD/target/source-builds" \
    step 900 nice -n 19 release/source-smoke.sh >"$beside_source" 2>&1 &
source_installs=$!

section "Node.js (the release platform package's native module)"
FENCELOCK_NPM_PLATFORM_PACKAGE="$PWD/dist/fencelock-linux-x64-gnu-$version.tgz" step 900 node/run-tests.sh

section "JVM: Kotlin and Java (the release's native library)"
FENCELOCK_JVM_LIBRARY="$PWD/target/dist-native/x86_64-unknown-linux-gnu/ci/libfencelock_jvm.so" step 900 bindings/jvm/run-tests.sh

section "Source installs (release/source-smoke.sh, run beside the Node and JVM suites above)"
source_failed=0
wait "$source_installs" || source_failed=1
grep -v '^ *Compiling ' "$beside_source"
[[ $source_failed == 0 ]] || { echo "the source installs failed"; exit 1; }

section "Fault injection (tests/faults: its own servers; every scenario x backend once, then the broken build)"
# Last: it needs the Python package and the Node module built above. About 4 minutes.
step 900 tests/faults/run.sh short

section "all tests passed"
