#!/usr/bin/env bash
# One command for the Python comparison (issue 7): builds fencelock's wheel in release, installs
# it beside redis-py, python-redis-lock, pottery and kazoo in a venv of its own, runs the Rust
# floors of the Redis, ZooKeeper and SQL backends, then compare.py, on the servers of
# tests/servers.sh (started here if they are not running).
#
#   bench/python/run.sh [--write] [compare.py args...]
#   bench/python/run.sh --suite shared [--runs N] [--write]
#   bench/python/run.sh --suite cycle [--runs N] [--write]
#   bench/python/run.sh --suite tracing [--runs N] [--baseline PYTHON] [--write]
#
# --write replaces the comparison section of bench/RESULTS.md with this run's table (the mutex
# section, with --suite shared the semaphore and read-lock section, with --suite cycle the
# uncontended Redis cycle's section).
# FENCELOCK_BENCH_FLOORS=0 skips the Rust floors; --suite shared and --suite cycle skip them too
# (they measure other things, or only this one).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${FENCELOCK_BENCH_VENV:-$root/target/bench-venv}"
cd "$root"

write=()
args=()
floors="${FENCELOCK_BENCH_FLOORS:-1}"
for arg in "$@"; do
    if [ "$arg" = --write ]; then write=(--write "$root/bench/RESULTS.md"); else args+=("$arg"); fi
    case "$arg" in shared | --suite=shared | cycle | --suite=cycle | tracing | --suite=tracing) floors=0 ;; esac
done

bash tests/servers.sh start redis redlock zookeeper postgres mariadb
set -a
eval "$(bash tests/servers.sh env)"
set +a

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
# The rivals, at the versions PyPI serves today (compare.py prints them).
"$venv/bin/python" -m pip install --quiet "maturin>=1.16,<2" redis python-redis-lock pottery kazoo \
    opentelemetry-sdk

cargo build --quiet --release -p fencelock-cli --bin fencelock
export FENCELOCK_CLI_BINARY="$root/target/release/fencelock"
rm -rf "$root/target/wheels-bench"
"$venv/bin/maturin" build --quiet --release --manifest-path "$root/python/Cargo.toml" \
    --interpreter "$venv/bin/python" --out "$root/target/wheels-bench"
"$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps "$root"/target/wheels-bench/fencelock-*.whl

if [ "$floors" != 0 ]; then
    for floor in redis_floor zk_floor sql_floor; do
        printf '\n== Rust floor: %s\n' "$floor"
        cargo run --quiet --release -p fencelock-bench --bin "$floor"
    done
fi

cd "$root/target"
if [ "${args[0]:-}" = --suite ] && [ "${args[1]:-}" = tracing ]; then
    printf '\n== What tracing costs (tracing.py)\n'
    exec "$venv/bin/python" "$here/tracing.py" "${write[@]}" "${args[@]:2}"
fi
printf '\n== Python comparison\n'
"$venv/bin/python" "$here/compare.py" "${write[@]}" "${args[@]}"
