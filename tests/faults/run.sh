#!/usr/bin/env bash
# The fault-injection suite (tests/faults/README.md). As root, on loopback, with its own servers.
#
#   tests/faults/run.sh short     build the workers, run every scenario x backend once (CI), then
#                                 check that the broken build (fencing off) makes the checker fail
#   tests/faults/run.sh soak [--minutes M] [--clients N] [--backends a,b]   CI's overflow, within
#                                 an hour: starts the test servers; it::redis::lock with every lock
#                                 script sent twice, each language's suite on every backend, 200
#                                 Python exits under load; then 16 clients, M (3) min per backend
#   tests/faults/run.sh one SCENARIO BACKEND [--langs rust,python,node,jvm]   (default: the
#                                 scenario's languages, else Rust, Python and Node)
#   tests/faults/run.sh record [RESULTS.jsonl...]   fold run summaries (default: the state
#                                 folder's results.jsonl) into tests/faults/summary.json, the
#                                 committed record, and regenerate tests/FAULTS.md from it
#   tests/faults/run.sh report    regenerate tests/FAULTS.md from tests/faults/summary.json
#   tests/faults/run.sh build-workers   build the Rust workers only (CI builds them beside its tests)
#
# Every run's summary is appended to $FENCELOCK_FAULTS_DIR/results.jsonl and its history kept in
# its runs/ folder; nothing is committed unless recorded.
# Environment: FENCELOCK_FAULTS_DIR (default /tmp/fencelock-faults: servers, results, histories),
# FENCELOCK_FAULTS_RECORD=1 (short, soak, one, broken: record this invocation's runs at the end,
# pass or fail), FENCELOCK_FAULTS_SKIP_BUILD=1 (use the workers already built),
# FENCELOCK_FAULTS_KEEP_SERVERS=1 (short: leave the suite's servers running; `run.sh
# stop-servers` stops them), FENCELOCK_FAULTS_PROFILE (the Rust workers' cargo profile: dev;
# ci in the soak).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
cmd=${1:-short}
(($#)) && shift

state=${FENCELOCK_FAULTS_DIR:-/tmp/fencelock-faults}
results=(--results "$state/results.jsonl")
# Stamped on every run's summary, so that record() folds this invocation's runs only.
export FENCELOCK_FAULTS_INVOCATION=${FENCELOCK_FAULTS_INVOCATION:-$(date -u +%Y%m%dT%H%M%SZ)-$$}

# The Rust workers go to target/faults-workers/ (harness.py and runs.py run them from there),
# built in the cargo profile FENCELOCK_FAULTS_PROFILE (default dev; CI's tests/run-all.sh uses
# ci, whose dependencies its tests compiled already).
profile=${FENCELOCK_FAULTS_PROFILE:-dev}
rust_worker() { # rust_worker NAME [cargo args...]: builds the worker, copies it to NAME
  local dir=$profile
  [[ $profile == dev ]] && dir=debug
  cargo build --quiet --profile "$profile" -p fencelock-faults-worker "${@:2}"
  mkdir -p target/faults-workers
  cp "target/$dir/fencelock-faults-worker" "target/faults-workers/$1"
}
build_rust_workers() { # [broken]: the real worker, and first the broken one when asked
  if [[ ${1:-} == broken ]]; then
    echo "== faults: building the broken Rust worker (fencing off; test-only feature)"
    # Same target folder, so the dependency tree is shared: only fencelock core and the worker
    # build twice.
    rust_worker fencelock-faults-worker-broken --features broken-fencing
  fi
  echo "== faults: building the Rust worker (profile $profile)"
  rust_worker fencelock-faults-worker
}

build() { # build LANGS [broken]: the Rust worker (and the broken one), and what LANGS need
  [[ ${FENCELOCK_FAULTS_SKIP_BUILD:-} == 1 ]] && return 0
  local langs=",$1,"
  build_rust_workers "${2:-}"
  # The other languages only when a run uses them (`run.sh one semaphore-kill9 sqlite
  # --langs rust` needs no binding).
  if [[ $langs == *,python,* ]]; then
    [[ -x target/py-venv/bin/python ]] && target/py-venv/bin/python -c 'import fencelock' ||
      { echo "faults: the Python package is not installed in target/py-venv (run python/run-tests.sh first)" >&2; exit 1; }
  fi
  if [[ $langs == *,node,* ]]; then
    [[ -n $(ls node/fencelock.*.node 2>/dev/null) ]] ||
      { echo "faults: node/ has no native module (run node/run-tests.sh or node node/scripts/build.mjs first)" >&2; exit 1; }
  fi
  if [[ $langs == *,jvm,* ]]; then
    # Reuses bindings/jvm/run-tests.sh's classes and debug native library (seconds); without
    # them, builds them the same way first.
    echo "== faults: building the JVM worker"
    bindings/jvm/faults-worker/build.sh
  fi
}

record() { # with FENCELOCK_FAULTS_RECORD=1: this invocation's runs into summary.json, FAULTS.md
  if [[ ${FENCELOCK_FAULTS_RECORD:-} == 1 ]]; then
    echo "== faults: recording this invocation's runs (tests/faults/summary.json, tests/FAULTS.md)"
    "$py" "$here/harness.py" record --invocation "$FENCELOCK_FAULTS_INVOCATION" "$state/results.jsonl"
  fi
}

py=python3
stop_servers() {
  echo "== faults: stopping the suite's own servers ($state/servers)"
  FENCELOCK_SERVERS_DIR="$state/servers" bash tests/servers.sh stop >/dev/null || true
}
case $cmd in
  short)
    start=$SECONDS
    build "$("$py" "$here/harness.py" langs-short "$@")" broken
    echo "== faults: built in $((SECONDS - start))s"
    # Our servers stop at the end, pass or fail (unless asked to keep them for a rerun).
    [[ ${FENCELOCK_FAULTS_KEEP_SERVERS:-} == 1 ]] || trap stop_servers EXIT
    echo "== faults: the checker's own tests, the record's, and the release's check of it"
    (cd "$here" && "$py" -m unittest -q test_checker test_summary test_release_gate test_soak_step)
    rc=0
    rm -f "$state/short-summary.txt"
    "$py" "$here/harness.py" "${results[@]}" short "$@" || rc=$?
    echo "== faults: the broken build must make the checker fail"
    "$py" "$here/harness.py" "${results[@]}" broken || rc=1
    record || rc=1
    [[ -f $state/short-summary.txt ]] && cat "$state/short-summary.txt"
    echo "== faults: short profile done in $((SECONDS - start))s (exit $rc)"
    exit "$rc"
    ;;
  soak)
    # CI's overflow (CONTRIBUTING.md, "CI and its budget"), within an hour on a 2-core machine:
    # the steps below on the shared test servers, then the clients on the suite's own servers.
    # Each step's outcome is recorded as a run of this invocation (harness.py step), so the
    # record says which commit every part of the soak passed on: release/build.sh reads it.
    minutes=3
    args=("$@")
    for ((i = 0; i < ${#args[@]}; i++)); do
      [[ ${args[i]} == --minutes ]] && minutes=${args[i + 1]:-$minutes}
    done
    # Profile ci (dependencies unoptimised), as CI builds: about a third of the dev profile's
    # compiling, for tests that mostly wait on servers.
    export FENCELOCK_PROFILE=${FENCELOCK_PROFILE:-ci} FENCELOCK_FAULTS_PROFILE=${FENCELOCK_FAULTS_PROFILE:-ci}
    profile=$FENCELOCK_FAULTS_PROFILE
    bash tests/servers.sh start redis redlock cluster postgres mariadb zookeeper zk-ensemble zk-follower
    set -a
    eval "$(bash tests/servers.sh env)"
    set +a
    export FENCELOCK_REQUIRE_SERVERS=1
    # Every backend: CI runs the language suites on SQLite, Redis and ZooKeeper only.
    unset FENCELOCK_TEST_BACKENDS
    rc=0
    soak_step() { "$py" "$here/harness.py" "${results[@]}" step "$1" --minutes "$minutes" -- "${@:2}" || rc=1; }
    # The Redis lock tests with every lock script sent twice, as the Cluster client's retry
    # after a lost reply does (docs/redis.md, "Replayed scripts"): the core built again with a
    # test-only feature.
    soak_step redis-scripts-twice cargo test -q --profile "$FENCELOCK_PROFILE" -p fencelock \
      --features fault-injection-duplicate-scripts --test it redis::lock::
    # Each language's suite on every backend; their builds are the workers' below.
    soak_step python-every-backend python/run-tests.sh
    soak_step node-every-backend node/run-tests.sh
    soak_step jvm-every-backend bindings/jvm/run-tests.sh
    build rust,python,node,jvm
    # 200 Python processes that exit with fencelock's threads busy (docs/design.md §9.4); CI's
    # Python suite exits 20.
    soak_step python-exits target/py-venv/bin/python python/tests/_exit_stress.py --runs 200
    "$py" "$here/harness.py" "${results[@]}" soak --minutes "$minutes" "$@" || rc=1
    record || rc=1
    echo "== faults: soak done in $((SECONDS / 60)) minutes (exit $rc)"
    exit "$rc"
    ;;
  one)
    build "$("$py" "$here/harness.py" langs "$@")"
    rc=0
    "$py" "$here/harness.py" "${results[@]}" one "$@" || rc=$?
    record || rc=1
    exit "$rc"
    ;;
  broken)
    build rust broken
    rc=0
    "$py" "$here/harness.py" "${results[@]}" broken || rc=$?
    record || rc=1
    exit "$rc"
    ;;
  record)
    "$py" "$here/harness.py" record "$@"
    ;;
  report)
    "$py" "$here/harness.py" report "$@"
    ;;
  build-workers)
    build_rust_workers broken
    ;;
  stop-servers)
    stop_servers
    ;;
  *) sed -n 2,25p "$0" >&2; exit 2 ;;
esac
