#!/usr/bin/env bash
# Formatting and lint of every language: the first step of tests/run-all.sh (so of CI), where a
# failure is cheap. Exits non-zero on the first language that fails.
#
#   tests/lint.sh [--fix] [--skip-backend-features] [rust|python|node|jvm|docs|backend-features]...
#
# With no language, all five (rust includes backend-features unless --skip-backend-features:
# tests/run-all.sh runs that check apart, beside the core's tests, where the CPU is idle). --fix applies the formatters and the linters' safe fixes instead
# of checking (then look at `git diff`). The tools and their settings:
#   Rust     cargo fmt (rustfmt.toml), cargo clippy -D warnings on every crate and target,
#            cargo check of the core with each backend feature alone without warnings,
#            cargo doc with rustdoc's warnings (broken intra-doc links among them) denied,
#            tests/check-import-circles.py: no import circle between files of core/src but the
#            ones tests/import-circles.allow names
#   Python   ruff check and ruff format (ruff.toml), on every Python file of the repository
#   Node     biome (biome.jsonc) on every JavaScript and TypeScript file; tsc on index.d.ts as
#            users see it (node/test/types-check.ts)
#   JVM      spotless (bindings/jvm/pom.xml and its modules shedlock/, spring/): ktlint on the
#            Kotlin (.editorconfig), palantir-java-format on the Java
#   docs     tests/check-design-refs.py: every citation of the design (code comments,
#            docstrings, stubs, .d.ts, KDoc, docs/) names a section docs/design.md has;
#            tests/check-env-vars.py: docs/security.md lists every FENCELOCK_* variable shipped;
#            tests/check-doc-links.py: README.md's and docs/*.md's relative links reach a file
#            and heading, and the UPPER_SNAKE_CASE constants they name are in the sources
# Tool versions are pinned here (ruff), in node/package.json (biome, typescript) and in the pom.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

RUFF_VERSION=0.17.6

fix=0
skip_backend_features=0
languages=()
for arg in "$@"; do
    case "$arg" in
        --fix) fix=1 ;;
        --skip-backend-features) skip_backend_features=1 ;;
        rust | python | node | jvm | docs | backend-features) languages+=("$arg") ;;
        *) echo "tests/lint.sh: unknown argument $arg (see the header of this file)" >&2; exit 2 ;;
    esac
done
# docs first: it takes a second, so a dangling citation fails before the minutes of clippy.
[ ${#languages[@]} -gt 0 ] || languages=(docs rust python node jvm)

step() { printf '\n== lint: %s\n' "$*"; }
timed() {
    local started=$SECONDS
    "$@"
    echo "   ($((SECONDS - started))s)"
}

# The core with each backend feature alone (core/Cargo.toml): code that names a
# backend, or its client library, outside that backend's #[cfg(feature)] does not compile here,
# which the all-features clippy above cannot see. Code left unused by a missing backend is
# allowed (core/src/lib.rs); any other warning in the core's files fails. A check of the library
# only, not a build, to keep CI's time (CONTRIBUTING.md, "CI and its budget").
check_backend_features() {
    local feature out
    # Each backend alone; not with none at all (a core without a backend serves nobody, and
    # checking it cost about 30 s more: tokio and the shared dependencies with fewer features).
    for feature in redis zookeeper sqlite postgres mysql; do
        out="$(cargo check --quiet --locked --profile ci --message-format=short -p fencelock --lib \
            --no-default-features ${feature:+--features "$feature"} 2>&1)" || {
            printf '%s\n' "$out"
            echo "cargo check of the core with features [${feature}] failed" >&2
            return 1
        }
        if grep -q '^core/.*: warning' <<<"$out"; then
            printf '%s\n' "$out"
            echo "the core with features [${feature}] has warnings" >&2
            return 1
        fi
    done
}

lint_rust() {
    # rustup's default profile has both; a minimal one has neither.
    cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
    cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
    if [ $fix = 1 ]; then
        step "cargo fmt, cargo clippy --fix"
        cargo fmt --all
        cargo clippy --quiet --fix --allow-dirty --allow-staged --workspace --all-targets --all-features
        return
    fi
    step "tests/check-import-circles.py (no new import circle between files of core/src)"
    timed python3 tests/check-import-circles.py
    step "cargo fmt --all --check"
    local color=()
    [ -t 1 ] || color=(-- --color=never)
    timed cargo fmt --all --check "${color[@]}"
    # One invocation for the whole workspace: split in two (the bindings' libraries apart, to
    # skip their test targets), it took 37 s longer in CI, because each half unifies the
    # dependencies' features differently and checks them again.
    # Profile ci, as CI's tests and helpers are built: the build scripts (bundled SQLite's C,
    # ring's) and proc macros compiled here serve those builds too.
    step "cargo clippy --profile ci --workspace --all-targets --all-features -- -D warnings"
    timed cargo clippy --quiet --locked --profile ci --workspace --all-targets --all-features \
        -- -D warnings
    [ $skip_backend_features = 1 ] || lint_backend_features
    step "cargo doc --no-deps --workspace, rustdoc warnings denied"
    RUSTDOCFLAGS="-D warnings" timed cargo doc --quiet --locked --profile ci --no-deps --workspace
}

lint_backend_features() {
    [ $fix = 0 ] || return 0
    step "cargo check -p fencelock --lib --no-default-features --features each of redis zookeeper sqlite postgres mysql"
    timed check_backend_features
}

lint_python() {
    local venv="$root/target/lint-venv"
    if [ ! -x "$venv/bin/ruff" ] || [ "$("$venv/bin/ruff" --version)" != "ruff $RUFF_VERSION" ]; then
        python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "ruff==$RUFF_VERSION"
    fi
    if [ $fix = 1 ]; then
        step "ruff check --fix, ruff format"
        "$venv/bin/ruff" check --fix .
        "$venv/bin/ruff" format .
        return
    fi
    step "ruff check, ruff format --check"
    timed "$venv/bin/ruff" check --no-cache .
    timed "$venv/bin/ruff" format --no-cache --check .
}

lint_node() {
    step "npm dependencies of node/ (biome, typescript)"
    # --ignore-scripts: the package's install script would build the native module.
    (cd node && timed npm install --no-audit --no-fund --ignore-scripts --loglevel=error)
    if [ $fix = 1 ]; then
        step "biome check --write"
        node/node_modules/.bin/biome check --write .
        return
    fi
    step "biome ci (format and lint)"
    timed node/node_modules/.bin/biome ci --colors=off .
    step "tsc --noEmit -p node/tsconfig.json (index.d.ts as users see it)"
    timed node/node_modules/.bin/tsc --noEmit -p node/tsconfig.json
}

lint_jvm() {
    local goal=check
    [ $fix = 1 ] && goal=apply
    step "mvn spotless:$goal (ktlint, palantir-java-format)"
    timed mvn -B -q -f bindings/jvm/pom.xml "spotless:$goal"
    timed mvn -B -q -f bindings/jvm/shedlock/pom.xml "spotless:$goal"
    timed mvn -B -q -f bindings/jvm/spring/pom.xml "spotless:$goal"
}

lint_docs() {
    step "tests/check-design-refs.py (citations of docs/design.md resolve), tests/check-env-vars.py, tests/check-doc-links.py"
    if [ $fix = 1 ]; then
        # Nothing to fix automatically: report the file:line to edit, and go on fixing the rest.
        python3 tests/check-design-refs.py || true
        python3 tests/check-env-vars.py || true
        python3 tests/check-doc-links.py || true
        return
    fi
    timed python3 tests/check-design-refs.py
    timed python3 tests/check-env-vars.py
    timed python3 tests/check-doc-links.py
}

for language in "${languages[@]}"; do
    "lint_${language//-/_}"
done
step "clean: ${languages[*]}"
