#!/usr/bin/env bash
# Installs the npm dev dependencies, builds the native module (debug) and the fencelock binary
# into the package, and runs the tests with node's test runner.
#
#   node/run-tests.sh [node --test args...]
#
# Environment:
#   FENCELOCK_PROFILE   cargo profile: dev (default here, fast to build) or release
#   CARGO_TARGET_DIR    cargo's target folder (default: the workspace's target/, which under CI is
#                       the folder `cargo test` already filled, so the dependency tree is reused)
#   FENCELOCK_NPM_PLATFORM_PACKAGE   test the native module and command of this platform package
#                       tarball (dist/fencelock-linux-x64-gnu-V.tgz from release/build.sh) instead
#                       of building them: CI tests what users install
#   FENCELOCK_TEST_*_URL, FENCELOCK_REQUIRE_SERVERS   as for every test suite (tests/servers.sh env)
#   FENCELOCK_TEST_BACKENDS   the backends to test, comma-separated (sqlite, redis, redis-cluster,
#                       redlock, zookeeper, postgres, mariadb); unset, every one whose URL is set.
#                       CI tests sqlite,redis,zookeeper (CONTRIBUTING.md, "Which tests run where")
#
# Needs Node 20+, npm and Rust (cargo). Exits non-zero on any failure, including no test run.
# index.d.ts is checked by tsc in `tests/lint.sh node`, with the other static checks.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# A path given relative to where the script was called from stays valid after the cd below.
if [ -n "${FENCELOCK_NPM_PLATFORM_PACKAGE:-}" ]; then
    FENCELOCK_NPM_PLATFORM_PACKAGE="$(realpath "$FENCELOCK_NPM_PLATFORM_PACKAGE")"
fi
cd "$here"

step() { printf '\n== %s\n' "$*"; }

step "npm dependencies"
# --ignore-scripts: the package's own install script would build in release; we build below.
npm install --no-audit --no-fund --ignore-scripts --loglevel=error

if [ -n "${FENCELOCK_NPM_PLATFORM_PACKAGE:-}" ]; then
    step "native module and fencelock binary from $(basename "$FENCELOCK_NPM_PLATFORM_PACKAGE")"
    # Where a source checkout keeps them (lib/platform.js looks there first).
    unpacked="$(mktemp -d)"
    tar -xzf "$FENCELOCK_NPM_PLATFORM_PACKAGE" -C "$unpacked"
    module="$(ls "$unpacked"/package/fencelock.*.node)"
    install -m 755 "$module" "$here/$(basename "$module")"
    install -D -m 755 "$unpacked/package/fencelock" "$here/native/fencelock"
    rm -rf "$unpacked"
else
    step "building the native module and the fencelock binary (profile ${FENCELOCK_PROFILE:-dev})"
    node scripts/build.mjs --profile "${FENCELOCK_PROFILE:-dev}" --test-hooks
fi

step "node --test"
# A module without the test hooks, or a misspelt FENCELOCK_TEST_BACKENDS, stops here with one
# message instead of failing every test file.
node test/preflight.mjs
shopt -s nullglob
tests=(test/*.test.mjs)
if [ ${#tests[@]} -eq 0 ]; then
    echo "no test files" >&2
    exit 1
fi
# A test that hangs fails by name after 3 minutes (the slowest takes about 20 s).
# The files run three at a time: their tests wait on servers and timers, not on the CPU (about
# 60 s instead of 150 s on a 2-core machine). The terminal test (cli.test.mjs) runs alone after
# them: it drives job control through a pseudo-terminal, whose timing a loaded machine upsets.
parallel=() alone=()
for file in "${tests[@]}"; do
    case "$file" in
        test/cli.test.mjs) alone+=("$file") ;;
        *) parallel+=("$file") ;;
    esac
done
node --test --test-concurrency=3 --test-reporter=spec --test-timeout=180000 "$@" "${parallel[@]}"
if [ ${#alone[@]} -gt 0 ]; then
    node --test --test-reporter=spec --test-timeout=180000 "$@" "${alone[@]}"
fi
