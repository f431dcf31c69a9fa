#!/usr/bin/env bash
# Builds the fencelock wheel once, installs it into a venv, checks the stubs, runs the tests.
#
#   python/run-tests.sh [pytest args...]
#
# Environment:
#   FENCELOCK_VENV     the venv to create or reuse (default: <repo>/target/py-venv)
#   PYTHON             the interpreter that creates the venv (default: python3)
#   FENCELOCK_PROFILE  cargo profile for the wheel: dev (default, fast to build), ci (dependencies
#                      unoptimised, as CI and the soak build) or release
#   SKIP_STUBTEST=1    skip mypy's stubtest
#   FENCELOCK_WHEEL    test this wheel instead of building one (CI tests the release wheel that
#                      release/build.sh put in dist/: what users install is what is tested)
#   FENCELOCK_MATURIN_TARGET_DIR  cargo target folder for the wheel (default: <repo>/target/maturin,
#                      or <repo>/target under CI, where sharing cargo test's folder saves
#                      compiling the dependency tree twice)
#   FENCELOCK_TEST_*_URL, FENCELOCK_REQUIRE_SERVERS   as for every test suite (tests/servers.sh env)
#   FENCELOCK_TEST_BACKENDS   the backends to test, comma-separated (sqlite, redis, redis-cluster,
#                      redlock, zookeeper, postgres, mariadb); unset, every one whose URL is set.
#                      CI tests sqlite,redis,zookeeper (CONTRIBUTING.md, "Which tests run where");
#                      a name that is not a backend stops the run (python/tests/conftest.py)
#
# Needs Rust (cargo) and network access to PyPI (maturin, pytest, mypy). Exits non-zero on any
# failure, including pytest finding no test.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
venv="${FENCELOCK_VENV:-$root/target/py-venv}"
python="${PYTHON:-python3}"
profile="${FENCELOCK_PROFILE:-dev}"
# On a developer machine maturin gets a target folder of its own, so its pyo3 build does not
# invalidate plain cargo builds of the workspace (and the other way round). CI builds once, after
# `cargo test`, so it shares that folder and reuses the compiled dependencies.
if [ -n "${CI:-}" ]; then
    default_target="$root/target"
else
    default_target="$root/target/maturin"
fi
target_dir="${FENCELOCK_MATURIN_TARGET_DIR:-$default_target}"
wheels="$root/target/wheels-py"

step() { printf '\n== %s\n' "$*"; }

step "venv at $venv"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
# opentelemetry-sdk: test_metrics.py reads the metrics back through the SDK's in-memory reader.
"$venv/bin/python" -m pip install --quiet "pytest>=7" "mypy>=1.10" "opentelemetry-sdk>=1.20"
# The frameworks the recipes of python/recipes/ run in (tests/test_recipes.py).
"$venv/bin/python" -m pip install --quiet "celery[redis]>=5.3" "django>=4.2" "fastapi>=0.110" \
    "httpx>=0.27" "gunicorn>=22"
[ -n "${FENCELOCK_WHEEL:-}" ] || "$venv/bin/python" -m pip install --quiet "maturin>=1.16,<2"

if [ -n "${FENCELOCK_WHEEL:-}" ]; then
    wheel="$FENCELOCK_WHEEL"
    [ -f "$wheel" ] || { echo "FENCELOCK_WHEEL=$wheel: no such file" >&2; exit 1; }
    step "testing the given wheel $(basename "$wheel")"
else
    step "building the fencelock command the wheel ships (profile $profile)"
    # `cargo test` has usually built it already into the same folder, so this is a no-op in CI.
    case "$profile" in dev) cli_dir=debug ;; *) cli_dir=$profile ;; esac
    cargo build --quiet -p fencelock-cli --bin fencelock --profile "$profile" --target-dir "$target_dir"
    export FENCELOCK_CLI_BINARY="$target_dir/$cli_dir/fencelock"

    # test-hooks: entry points that panic on purpose, for the tests; never in a release.
    step "building the wheel (profile $profile, with the test-only test-hooks feature)"
    rm -rf "$wheels"
    start=$(date +%s)
    "$venv/bin/maturin" build \
        --manifest-path "$here/Cargo.toml" \
        --target-dir "$target_dir" \
        --profile "$profile" \
        --features test-hooks \
        --interpreter "$venv/bin/python" \
        --out "$wheels"
    echo "built in $(( $(date +%s) - start ))s"
    wheel=$(ls "$wheels"/fencelock-*.whl)
fi

step "installing it"
"$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheel"

# Run from outside the source tree, so `import fencelock` finds the installed package (with its
# native module), not python/fencelock.
cd "$root/target"

if [ "${SKIP_STUBTEST:-0}" != 1 ]; then
    step "mypy stubtest of fencelock._native"
    "$venv/bin/python" -m mypy.stubtest fencelock._native
    step "mypy on the tests (the public API's types as users see them)"
    "$venv/bin/python" -m mypy --no-incremental --ignore-missing-imports \
        --check-untyped-defs "$here/tests"
fi

step "pytest"
set +e
# PYTHONFAULTHANDLER: a crash of the interpreter, also while it shuts down after the tests (where
# pytest's own fault handler is off), prints every Python thread's stack.
PYTHONFAULTHANDLER=1 "$venv/bin/pytest" -c "$here/pyproject.toml" --rootdir "$here" -p no:cacheprovider "$here/tests" "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "pytest ran no test" >&2
    exit 1
fi
exit "$status"
