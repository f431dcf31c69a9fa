#!/usr/bin/env bash
# Runs every test of every language: the README's "run every test" command, and what
# .ci/run calls. Works on a fresh machine: it installs and starts what the tests need.
set -euo pipefail
cd "$(dirname "$0")/.."

section() { printf '\n=== %s ===\n' "$*"; }

# A test profile with dependencies at a low opt level keeps the 2-core build short.
export CARGO_TERM_COLOR=never

section "Test servers (Debian packages, loopback)"
bash tests/servers.sh start redis redlock cluster postgres mariadb zookeeper zk-ensemble
set -a
eval "$(bash tests/servers.sh env)"
set +a
# Every server was started above: a test that cannot reach one fails instead of skipping.
export FENCELOCK_REQUIRE_SERVERS=1

section "Rust: core and the fencelock command"
# default-members: the crates that need no Python, Node or JDK.
cargo test --no-fail-fast

if [ -x python/run-tests.sh ]; then
  section "Python"
  python/run-tests.sh
fi

if [ -x node/run-tests.sh ]; then
  section "Node.js"
  node/run-tests.sh
fi

if [ -x bindings/jvm/run-tests.sh ]; then
  section "JVM: Kotlin and Java"
  bindings/jvm/run-tests.sh
fi

section "Fault injection (tests/faults: its own servers; every scenario x backend once, then the broken build)"
# Last: it needs the Python package and the Node module built above. About 4 minutes.
tests/faults/run.sh short

section "all tests passed"
