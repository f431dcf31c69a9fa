#!/usr/bin/env bash
# Runs every test of every language: the README's "run every test" command, and what
# .ci/run calls. Works on a fresh machine: it installs and starts what the tests need.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# Each section's wall time goes to target/ci-times.json (tests/ci-times.py turns such files into
# tests/CI.md: CONTRIBUTING.md, "CI and its budget").
times=target/ci-times.tsv
mkdir -p target
: >"$times"
section_key="" section_start=$SECONDS
section() { # section KEY TITLE: ends the section before (recording its time), starts KEY
    [[ -z $section_key ]] || printf '%s\t%s\n' "$section_key" $((SECONDS - section_start)) >>"$times"
    section_key=$1 section_start=$SECONDS
    printf '\n=== %s ===\n' "$2"
}

# Each step with a time limit (seconds, about three times what it takes on a 2-core machine) and
# no controlling terminal: a hang fails with what was running (tests/step.sh).
step() { bash "$root/tests/step.sh" "$@"; }

# A test profile with dependencies at a low opt level keeps the 2-core build short.
export CARGO_TERM_COLOR=never

section lint "Lint: formatting and lint of every language (tests/lint.sh; tests/lint.sh --fix repairs)"
# First: a formatting or lint failure costs minutes here, not the whole run.
# Its check of the core with each backend feature alone runs later, beside the core's tests.
step 900 bash tests/lint.sh --skip-backend-features

section servers "Test servers (Debian packages, loopback)"
bash tests/servers.sh start redis redlock cluster postgres mariadb zookeeper zk-ensemble zk-follower
set -a
eval "$(bash tests/servers.sh env)"
set +a
# Every server was started above: a test that cannot reach one fails instead of skipping.
export FENCELOCK_REQUIRE_SERVERS=1
# The fault suite's Rust workers in the profile of the Rust tests below, on their dependencies.
export FENCELOCK_FAULTS_PROFILE=ci

section rust "Rust: core and the fencelock command"
# uniffi-bindgen, which the release step's JVM jar runs: about two minutes of compiling, niced
# from here on (the compiles below leave CPU idle while they link, the tests after them most of
# it), in a target folder of its own that bindings/jvm/pom.xml looks in.
bindgen_log=target/bindgen_build.log
step 1800 nice -n 19 cargo build -q -p fencelock-jvm-bindgen --profile ci \
    --target-dir target/bindgen >"$bindgen_log" 2>&1 &
bindgen=$!
# Four test executables: the core's unit tests, its `it` binary (the lock contract on every
# backend and each backend's own tests; nothing in it disturbs a shared server), its `faults`
# binary (scenarios that restart, stop or cut the shared servers) and the command's `it` (its
# unit tests too). Built in profile ci, whose dependencies are compiled without optimisation:
# about 3 times less compiling than the dev profile (deps at opt-level 1), for tests that run
# about a fifth longer (they mostly wait on servers), and on the build scripts and proc macros
# lint's clippy compiled in that profile. The doctests next.
step 1800 cargo test --no-run -q --profile ci --message-format=json-render-diagnostics \
    -p fencelock -p fencelock-cli --lib --bins --tests >target/test-builds.json
step 300 cargo test -q --profile ci -p fencelock --doc
# The executables by name (core/fencelock, core/it, core/faults, cli/fencelock, cli/it), run
# directly below, each in its package's folder as cargo would: a cargo command waits for
# target/'s lock, which the builds beside the tests hold while they compile.
declare -A test_bin test_dir
while IFS=$'\t' read -r key path dir; do test_bin[$key]=$path test_dir[$key]=$dir; done < <(
    python3 tests/test-executables.py <target/test-builds.json)
run_tests() { # run_tests LIMIT KEY [test binary args...]
    local limit=$1 key=$2
    shift 2
    (cd "${test_dir[$key]}" && step "$limit" "${test_bin[$key]}" "$@")
}
# Beside the tests, niced below them: lint's check of the core with each backend feature alone
# (check mode, on clippy's artifacts) and the fault suite's Rust workers (on the tests'
# dependencies).
beside_log=target/beside_rust_tests.log
step 1800 bash -c 'nice -n 15 bash tests/lint.sh backend-features &&
    nice -n 15 tests/faults/run.sh build-workers &&
    echo "(the feature check and the fault workers done in ${SECONDS} s)"' \
    >"$beside_log" 2>&1 &
beside=$!
failed=()
# The fault scenarios first, alone but for the core's unit tests (which use no server): they
# restart the servers the other tests use. Each module runs its scenarios one at a time (they
# disturb one server) and beside the other modules, so every test gets a thread of its own and
# waits for its module's turn (core/tests/faults/main.rs). The unit tests take one thread: the
# Redlock model's checks are a minute of CPU, which on one core ends with the fault scenarios
# and leaves the other to them and the builds beside. Niced, so that a restart in a scenario
# goes first (on a busy CI machine restarts took 16 s instead of 1, and scenarios failed).
unit_log=target/unit_tests.log
(renice -n 10 "$BASHPID" >/dev/null && run_tests 600 core/fencelock --test-threads 1) >"$unit_log" 2>&1 &
unit_tests=$!
run_tests 900 core/faults --test-threads 64 || failed+=("the core's fault scenarios")
wait "$unit_tests" || failed+=("the core's unit tests")
echo "--- the core's unit tests, run beside the fault scenarios:"
cat "$unit_log"
# Then everything else, eight at a time: the contract's tests mostly wait on servers and on
# timers (about 0.5 of a core at eight). The command's tests run beside them in a second
# process, as their own processes mostly sleep.
cli_log=target/cli_tests.log
{ run_tests 900 cli/fencelock && run_tests 900 cli/it; } >"$cli_log" 2>&1 &
cli_tests=$!
run_tests 1200 core/it --test-threads 8 || failed+=("the core's integration tests")
wait "$cli_tests" || failed+=("the command's tests")
echo "--- the command's tests, run beside the core's:"
cat "$cli_log"
wait "$beside" || failed+=("the feature check or the build of the fault workers")
echo "--- beside the tests:"
cat "$beside_log"
wait "$bindgen" || { cat "$bindgen_log"; failed+=("the build of uniffi-bindgen"); }
[[ ${#failed[@]} == 0 ]] || { echo "failed: ${failed[*]}"; exit 1; }
# The Redis lock tests with every script sent twice (the test-only duplicate-scripts build)
# run in the soak (tests/faults/run.sh soak), outside CI's budget.

section release "Release artifacts: build (zig, glibc 2.17, profile ci) and smoke tests without Rust"
# The bindings' tests below run on these artifacts instead of building their own: what users
# install is what is tested, and nothing native is built twice. (Profile ci, unoptimised, keeps
# the build within CI's time; a release builds profile dist, the same way.)
step 1200 release/build.sh --profile ci
step 300 release/smoke.sh
version="$(python3 release/version.py)"

# The language suites test what each language adds to the core (CONTRIBUTING.md, "Which tests
# run where"): on SQLite, and on the backends a language reaches by another path (Redis: I/O the
# caller drives, Node's executor; ZooKeeper: sessions). The core's conformance suite above ran
# the lock contract on every backend; each language's suite on every backend runs in the soak.
export FENCELOCK_TEST_BACKENDS=sqlite,redis,zookeeper

section python "Python (the release wheel)"
FENCELOCK_WHEEL="$(ls "$PWD"/dist/fencelock-"$version"-*.whl)" step 900 python/run-tests.sh

# The source installs for platforms without a prebuilt artifact (the sdist through pip, the npm
# package without its platform package): 3 minutes of compiling on an idle machine, run niced
# beside the Node and JVM suites, which mostly wait on servers; its log is printed before the
# fault suite, which needs the machine to itself. Not beside the Python suite, whose exit tests
# (python/tests/test_exit.py) load the CPU themselves.
beside_source=target/source_installs.log
FENCELOCK_SOURCE_PROFILE=ci CARGO_TARGET_DIR="$PWD/target/source-builds" \
    step 900 nice -n 19 release/source-smoke.sh >"$beside_source" 2>&1 &
source_installs=$!

section node "Node.js (the release platform package's native module)"
FENCELOCK_NPM_PLATFORM_PACKAGE="$PWD/dist/fencelock-linux-x64-gnu-$version.tgz" step 900 node/run-tests.sh

section jvm "JVM: Kotlin and Java (the release's native library)"
# Its crate's unit tests in profile ci, on the dependencies the Rust tests compiled.
FENCELOCK_PROFILE=ci FENCELOCK_JVM_LIBRARY="$PWD/target/dist-native/x86_64-unknown-linux-gnu/ci/libfencelock_jvm.so" \
    step 900 bindings/jvm/run-tests.sh

section source "Source installs (release/source-smoke.sh, run beside the Node and JVM suites above)"
source_failed=0
wait "$source_installs" || source_failed=1
grep -v '^ *Compiling ' "$beside_source"
[[ $source_failed == 0 ]] || { echo "the source installs failed"; exit 1; }

section faults "Fault injection (tests/faults: its own servers; every scenario x backend once, then the broken build)"
# Last: it needs the Python package and the Node module built above. About 4 minutes.
step 900 tests/faults/run.sh short

section done "all tests passed"
python3 tests/ci-times.py finish "$times" "$SECONDS" >target/ci-times.json
python3 tests/ci-times.py show target/ci-times.json
