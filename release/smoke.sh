#!/usr/bin/env bash
# Installs each artifact of dist/ (release/build.sh) into a clean environment with no Rust
# toolchain on PATH, and locks on SQLite through it:
#   wheel  -> a fresh venv (pip install --no-index: nothing else is fetched)
#   npm    -> an empty npm project (both tarballs; the platform package is what npm would pick)
#   jar    -> a fresh local Maven repository (bindings/jvm/release-smoke.sh)
#   CLI    -> the tarball unpacked in an empty folder
#
#   release/smoke.sh [DIST]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dist="$(cd "${1:-$root/dist}" && pwd)"
version="$(python3 "$root/release/version.py")"
work="$(mktemp -d /tmp/fencelock-smoke.XXXXXX)"
trap 'rm -rf "$work"' EXIT

# The interpreters' own folders and the system's, but not ~/.cargo/bin: no cargo, no rustc.
python="$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')"
clean_path="$(dirname "$python"):$(dirname "$(command -v node)"):/usr/local/bin:/usr/bin:/bin"
clean() { env -i HOME="$work/home" PATH="$clean_path" TMPDIR="$work" "$@"; }
mkdir -p "$work/home"
if clean sh -c 'command -v cargo || command -v rustc' >/dev/null; then
    echo "smoke: a Rust toolchain is on the clean PATH ($clean_path)" >&2
    exit 1
fi

step() { printf '\n== smoke: %s\n' "$*"; }
# shellcheck source=smoke/cli_check.sh
. "$root/release/smoke/cli_check.sh"

step "wheel into a fresh venv"
wheel="$(ls "$dist"/fencelock-"$version"-*.whl)"
clean "$python" -m venv "$work/venv"
clean "$work/venv/bin/pip" install --quiet --no-index --disable-pip-version-check "$wheel"
(cd "$work" && clean "$work/venv/bin/python" "$root/release/smoke/lock.py")
cli_check "$work/cli.db" "$work/venv/bin/fencelock" clean

step "npm packages into an empty project"
mkdir -p "$work/npm-project"
(
    cd "$work/npm-project"
    clean npm init -y >/dev/null
    clean npm install --no-audit --no-fund --no-update-notifier --loglevel=error \
        "$dist/fencelock-linux-x64-gnu-$version.tgz" "$dist/fencelock-$version.tgz"
    test -f node_modules/fencelock-linux-x64-gnu/fencelock.linux-x64-gnu.node
    cp "$root/release/smoke/lock.mjs" .
    clean node lock.mjs
)
cli_check "$work/cli.db" "$work/npm-project/node_modules/.bin/fencelock" clean

step "CLI tarball into an empty folder"
mkdir -p "$work/cli"
tar -C "$work/cli" -xzf "$dist/fencelock-$version-x86_64-linux-gnu.tar.gz"
cli_check "$work/cli.db" "$work/cli/fencelock-$version-x86_64-linux-gnu/fencelock" clean

step "jar into a fresh local Maven repository"
bash "$root/bindings/jvm/release-smoke.sh" --dist "$dist" --version "$version" --work "$work/maven"

step "every artifact installed and locked"
