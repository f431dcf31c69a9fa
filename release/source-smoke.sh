#!/usr/bin/env bash
# The source installs of dist/ (release/build.sh), for platforms no prebuilt artifact fits: each
# package is installed the way a user there installs it, compiles with cargo, and locks on SQLite
# (release/smoke/lock.py, lock.mjs) and through its `fencelock` command.
#   python -> the sdist into a fresh venv: pip fetches maturin from PyPI and compiles the
#             extension and the command
#   node   -> the main npm package alone into an empty project, its platform package absent: its
#             install script compiles the native module and the command from its source/
#
#   release/source-smoke.sh [python] [node]        (default: both)
#
# FENCELOCK_SOURCE_PROFILE is the cargo profile both compile with: release (the default) is what
# a user gets; CI passes ci (no optimisation) to stay within its time. CARGO_TARGET_DIR, if set,
# is shared by both builds (CI points it at a folder of its own), so the dependencies they have in
# common compile once.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dist="$root/dist"
version="$(python3 "$root/release/version.py")"
profile="${FENCELOCK_SOURCE_PROFILE:-release}"
work="$(mktemp -d /tmp/fencelock-source.XXXXXX)"
trap 'rm -rf "$work"' EXIT
languages=("$@")
[ ${#languages[@]} -gt 0 ] || languages=(python node)

step() { printf '\n== source install: %s\n' "$*"; }
elapsed() { echo "   ($(( $(date +%s) - $1 ))s)"; }
# shellcheck source=smoke/cli_check.sh
. "$root/release/smoke/cli_check.sh"

for language in "${languages[@]}"; do
    case "$language" in
    python)
        step "the Python sdist into a fresh venv, cargo profile $profile"
        started=$(date +%s)
        sdist="$dist/fencelock-$version.tar.gz"
        python3 -m venv "$work/venv"
        # No wheel may be picked: the sdist is the one thing pip is given, and it compiles.
        MATURIN_PEP517_ARGS="--profile $profile" "$work/venv/bin/pip" install --quiet \
            --disable-pip-version-check --no-binary fencelock "$sdist"
        elapsed "$started"
        (cd "$work" && "$work/venv/bin/python" "$root/release/smoke/lock.py")
        cli_check "$work/cli.db" "$work/venv/bin/fencelock"
        ;;
    node)
        step "the npm package without its platform package, cargo profile $profile"
        started=$(date +%s)
        mkdir -p "$work/npm-project"
        (
            cd "$work/npm-project"
            npm init -y >/dev/null
            # --omit=optional: npm leaves the platform package out, as on a platform it does not
            # match; the install script then compiles.
            FENCELOCK_PROFILE="$profile" npm install --no-audit --no-fund --no-update-notifier \
                --loglevel=error --foreground-scripts --omit=optional "$dist/fencelock-$version.tgz"
            test ! -e node_modules/fencelock-linux-x64-gnu
            test ! -e node_modules/fencelock/source/target
            cp "$root/release/smoke/lock.mjs" .
            node lock.mjs
        )
        elapsed "$started"
        cli_check "$work/cli.db" "$work/npm-project/node_modules/.bin/fencelock"
        ;;
    *) echo "release/source-smoke.sh: unknown language $language" >&2; exit 2 ;;
    esac
done
step "every source install compiled and locked"
