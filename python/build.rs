//! Puts the compiled `fencelock` command inside the Python package, so the wheel ships it and
//! its console script (`fencelock._cli`) can exec it: the command has one implementation, in
//! the `cli` crate, and Python does no forking or signal handling of its own.
//!
//! Only when maturin builds the extension module (it sets `PYO3_BUILD_EXTENSION_MODULE`): a
//! plain `cargo build --workspace` or `cargo clippy` leaves the source tree alone.
//!
//! `FENCELOCK_CLI_BINARY=/path/to/fencelock` copies an already built command (what
//! python/run-tests.sh does, reusing the binary `cargo test` built). Otherwise a nested cargo
//! builds the `fencelock-cli` package with the same profile into a target folder of its own (a
//! second cargo cannot share the outer build's folder while the outer build holds its lock).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const PACKAGED_BINARY: &str = "fencelock/_bin/fencelock";

fn main() {
    println!("cargo:rerun-if-env-changed=PYO3_BUILD_EXTENSION_MODULE");
    println!("cargo:rerun-if-env-changed=FENCELOCK_CLI_BINARY");
    if env::var_os("PYO3_BUILD_EXTENSION_MODULE").is_none() {
        return;
    }
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let destination = package_root(&manifest_dir).join(PACKAGED_BINARY);
    // The copy lives outside cargo's target folder: a build that finds it missing (a fresh
    // source tree built into a kept CARGO_TARGET_DIR) must run this script again.
    println!("cargo:rerun-if-changed={}", destination.display());
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        // The command's supervisor is Linux-only (cli/src/main.rs): the library is built alone.
        println!(
            "cargo:warning=the fencelock command runs on Linux only; building the library alone"
        );
        return;
    }

    let source = match env::var_os("FENCELOCK_CLI_BINARY") {
        Some(prebuilt) => {
            let prebuilt = PathBuf::from(prebuilt);
            println!("cargo:rerun-if-changed={}", prebuilt.display());
            prebuilt
        }
        None => build_cli(&manifest_dir),
    };
    copy_executable(&source, &destination);
}

/// The folder that holds the Python package `fencelock/`: python/ in the repository, the root
/// of an unpacked sdist (maturin moves pyproject.toml and the package up there).
fn package_root(manifest_dir: &Path) -> PathBuf {
    match manifest_dir.parent() {
        Some(root)
            if !manifest_dir.join("fencelock").exists()
                && root.join("fencelock/__init__.py").exists() =>
        {
            root.to_path_buf()
        }
        _ => manifest_dir.to_path_buf(),
    }
}

/// The cargo profile of this build: the folder OUT_DIR lies in (`<target>/[<triple>/]<profile
/// folder>/build/<package>/out`) is named for it, `debug` for dev. PROFILE says only "debug" or
/// "release", which would build the command of a `--profile ci` wheel as dev.
fn outer_profile() -> String {
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("set by cargo"));
    let folder = out_dir
        .ancestors()
        .nth(3)
        .and_then(Path::file_name)
        .and_then(|name| name.to_str())
        .expect("OUT_DIR is <target>/<profile>/build/<package>/out");
    match folder {
        "debug" => "dev".to_string(),
        other => other.to_string(),
    }
}

/// Builds the command with the profile of the current build and returns the binary's path.
fn build_cli(manifest_dir: &Path) -> PathBuf {
    let workspace = manifest_dir
        .parent()
        .expect("python/ lives in the workspace");
    for watched in [
        "cli/src",
        "cli/Cargo.toml",
        "core/src",
        "core/Cargo.toml",
        "Cargo.lock",
    ] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    let profile = outer_profile();
    let profile_dir = if profile == "dev" { "debug" } else { &profile };
    // Beside the outer build's folder (CARGO_TARGET_DIR when set, so that a source install
    // pointed at a kept folder compiles the command once), never inside its locked profile folder.
    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"))
        .join("wheel-cli");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(workspace)
        .args([
            "build",
            "--locked",
            "-p",
            "fencelock-cli",
            "--bin",
            "fencelock",
        ])
        .arg("--profile")
        .arg(&profile)
        .arg("--target-dir")
        .arg(&target_dir)
        // The outer build's settings for *this* crate must not leak into the command's build.
        .env_remove("PYO3_BUILD_EXTENSION_MODULE")
        .env_remove("CARGO_TARGET_DIR")
        .status()
        .unwrap_or_else(|error| {
            panic!("could not run cargo to build the fencelock command: {error}")
        });
    if !status.success() {
        panic!("building the fencelock command failed ({status})");
    }
    target_dir.join(profile_dir).join("fencelock")
}

fn copy_executable(source: &Path, destination: &Path) {
    if let Some(parent) = destination.parent() {
        fs::create_dir_all(parent)
            .unwrap_or_else(|error| panic!("could not create {}: {error}", parent.display()));
    }
    fs::copy(source, destination).unwrap_or_else(|error| {
        panic!(
            "could not copy {} to {}: {error}",
            source.display(),
            destination.display()
        )
    });
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(destination, fs::Permissions::from_mode(0o755)).unwrap_or_else(
            |error| {
                panic!(
                    "could not make {} executable: {error}",
                    destination.display()
                )
            },
        );
    }
}
