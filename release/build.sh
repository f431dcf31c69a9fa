#!/usr/bin/env bash
# Builds every release artifact into dist/, so users install fencelock without a Rust toolchain:
#
#   fencelock-V-cp39-abi3-manylinux_2_17_x86_64.whl   Python 3.9+ (maturin + zig), ships the command
#   fencelock-V.tar.gz                                 Python sdist: pip compiles it where no wheel fits
#   fencelock-V.tgz, fencelock-linux-x64-gnu-V.tgz    npm: the JS package + its platform package
#   fencelock-jvm-V.jar, fencelock-jvm-V.pom          JVM (dev.fencelock:fencelock:V), native library inside,
#     fencelock-jvm-V-sources.jar, -javadoc.jar        with its sources and javadoc (KDoc, by Dokka)
#   fencelock-shedlock-V*, fencelock-spring-V*         the JVM modules, each jar, -sources, -javadoc, POM
#   fencelock-V-x86_64-linux-gnu.tar.gz               the `fencelock` command alone
#   SHA256SUMS, BUILDINFO                              checksums; what was built, how, for which glibc
#
#   release/build.sh [--profile dist|dev|ci]
#
# Every native file is linked by zig against glibc 2.17 (cargo-zigbuild, and maturin's --zig for
# the wheel), so one build runs on any x86_64 Linux with glibc >= 2.17. The version is the
# workspace version in Cargo.toml (release/version.py). The tools (maturin, ziglang,
# cargo-zigbuild, auditwheel) come from PyPI into target/release-tools; Rust is needed here, never
# by the user. `--profile ci` (no optimisation, no debug info) is what CI builds to stay within
# its time budget; a release uses the default, `dist` (release, no debug info).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

profile=dist
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) profile="$2"; shift 2 ;;
        *) echo "release/build.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$profile" in
    dist) profile_dir=dist ;;
    dev) profile_dir=debug ;;
    ci) profile_dir=ci ;;
    *) echo "release/build.sh: --profile must be dist, dev or ci" >&2; exit 2 ;;
esac

# A release ships only what the soak (CI's overflow) passed on: release/check-soak.py refuses
# one whose last soak is older than the last change to the shipped code. CI's test builds skip it.
if [ "$profile" = dist ]; then
    python3 release/check-soak.py
fi

GLIBC=2.17
TRIPLE=x86_64-unknown-linux-gnu
version="$(python3 release/version.py)"
dist="$root/dist"
tools="$root/target/release-tools"
native_target="$root/target/dist-native"

step() { printf '\n== %s\n' "$*"; }
elapsed() { echo "   ($(( $(date +%s) - $1 ))s)"; }

step "fencelock $version, profile $profile, into $dist"
rm -rf "$dist"
mkdir -p "$dist"

step "release tools (PyPI) in $tools"
if [ ! -x "$tools/bin/python" ]; then
    python3 -m venv "$tools"
fi
"$tools/bin/python" -m pip install --quiet --disable-pip-version-check \
    "maturin==1.16.0" "ziglang==0.17.1" "cargo-zigbuild==0.24.1" "auditwheel==6.8.2"
export PATH="$tools/bin:$PATH"

# Builds other than dist are test builds: the language suites run on them, and their panic tests
# need the bindings' test-only `test-hooks` feature. A dist build never has it, nor any other
# test-only switch (release/check-test-switches.py, at the end, fails the build otherwise).
binding_features=()
wheel_features=()
if [ "$profile" != dist ]; then
    binding_features=(--features fencelock-node/test-hooks,fencelock-jvm/test-hooks)
    wheel_features=(--features test-hooks)
fi

# One cargo run for every native file but the wheel's: the dependency tree compiles once.
packages=(-p fencelock-cli -p fencelock-node -p fencelock-jvm)
step "native files: ${packages[*]} for $TRIPLE, glibc $GLIBC"
started=$(date +%s)
cargo zigbuild --locked --quiet "${packages[@]}" "${binding_features[@]}" --profile "$profile" \
    --target "$TRIPLE.$GLIBC" --target-dir "$native_target"
elapsed "$started"
built="$native_target/$TRIPLE/$profile_dir"
command_binary="$built/fencelock"
node_module="$built/libfencelock_node.so"

step "wheel (maturin --zig, manylinux2014 = manylinux_2_17)"
started=$(date +%s)
# The wheel ships the command built above (python/build.rs copies FENCELOCK_CLI_BINARY). In the
# native files' target folder: the dependency tree they compiled serves the wheel too.
FENCELOCK_CLI_BINARY="$command_binary" maturin build --quiet \
    --manifest-path python/Cargo.toml --zig --compatibility manylinux2014 --target "$TRIPLE" \
    --target-dir "$native_target" --profile "$profile" "${wheel_features[@]}" --out "$dist"
elapsed "$started"
wheel="$(ls "$dist"/fencelock-"$version"-*.whl)"
auditwheel show "$wheel" | tee "$root/target/auditwheel.txt"
wheel_tag="$(grep -o 'manylinux_[0-9]*_[0-9]*_x86_64' "$root/target/auditwheel.txt" | head -1)"

step "Python sdist (sources, for machines no wheel fits: release/sdist.py)"
python3 release/sdist.py --maturin "$tools/bin/maturin" --out "$dist" 2>/dev/null

step "npm packages (napi-rs platform-package layout)"
stage="$root/target/dist-npm"
node release/npm-stage.mjs --version "$version" --platform linux-x64-gnu \
    --module "$node_module" --command "$command_binary" --out "$stage" >/dev/null
for package in fencelock fencelock-linux-x64-gnu; do
    (cd "$stage/$package" && npm pack --quiet --pack-destination "$dist" >/dev/null)
done

step "CLI tarball"
cli_dir="fencelock-$version-x86_64-linux-gnu"
rm -rf "$root/target/$cli_dir"
mkdir -p "$root/target/$cli_dir"
cp "$command_binary" "$root/target/$cli_dir/fencelock"
cp release/CLI-README.txt "$root/target/$cli_dir/README.txt"
tar -C "$root/target" -czf "$dist/$cli_dir.tar.gz" --owner=0 --group=0 "$cli_dir"

step "JVM jar with the native library inside, and its POM"
bash bindings/jvm/release.sh --version "$version" --library "$built/libfencelock_jvm.so" --out "$dist"

step "checksums and build info"
newest_glibc="$(objdump -T "$command_binary" "$node_module" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
{
    echo "version: $version"
    echo "profile: $profile"
    echo "target: $TRIPLE, linked by zig against glibc $GLIBC (newest symbol used: $newest_glibc)"
    echo "wheel tag (auditwheel show): $wheel_tag"
    echo "rustc: $(rustc --version)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
} > "$dist/BUILDINFO"
(cd "$dist" && sha256sum -- *.whl *.tgz *.tar.gz *.jar *.pom > SHA256SUMS)
cat "$dist/BUILDINFO"

step "no test-only switch in a release (release/check-test-switches.py)"
python3 release/check-test-switches.py "$dist" --profile "$profile"
ls -l "$dist"
