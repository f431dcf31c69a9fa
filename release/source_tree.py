#!/usr/bin/env python3
"""The Rust sources a source build compiles, as a cargo workspace of their own.

    release/source_tree.py --members core,cli,node --out DIR

Writes DIR/Cargo.toml (the repository's workspace manifest with only MEMBERS), DIR/Cargo.lock
(the repository's, without the packages only the members left out use: see prune_lockfile), the
files git tracks of each member crate, and the patched ZooKeeper client that the workspace's
[patch.crates-io] points at. The npm package ships this tree (release/npm-stage.mjs) for
platforms without a prebuilt module; release/sdist.py uses the same pieces for the Python sdist.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What of each crate a build needs: the node/ and python/ folders also hold each language's own
# package, tests and tools, which a cargo build never reads.
CRATE_FILES = {
    "core": ["core"],
    "cli": ["cli"],
    "node": ["node/Cargo.toml", "node/build.rs", "node/src"],
    "python": ["python/Cargo.toml", "python/build.rs", "python/src"],
}
# Not a member: the workspace's [patch.crates-io] entry.
PATCHED_CRATES = ["third_party/zookeeper-client"]

MEMBERS_LINE = re.compile(r"^members = \[.*\]$", re.MULTILINE)
DEFAULT_MEMBERS_LINE = re.compile(r"^default-members = \[.*\]\n", re.MULTILINE)


def tracked_files(path: str) -> list:
    """The files git tracks at or under `path`, relative to the repository."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", path], cwd=ROOT, check=True, capture_output=True
    ).stdout
    return [name for name in listed.decode().split("\0") if name]


def crate_files(crate: str) -> list:
    if crate in PATCHED_CRATES:
        return tracked_files(crate)
    if crate not in CRATE_FILES:
        sys.exit(f"release/source_tree.py: no file list for the crate {crate}")
    return [name for path in CRATE_FILES[crate] for name in tracked_files(path)]


def workspace_manifest(manifest: str, members: list) -> str:
    """`manifest`, the workspace's Cargo.toml, with only `members` (and no default-members)."""
    if MEMBERS_LINE.search(manifest) is None:
        sys.exit("release/source_tree.py: the workspace manifest has no members line")
    line = "members = [" + ", ".join(f'"{m}"' for m in members) + "]"
    return DEFAULT_MEMBERS_LINE.sub("", MEMBERS_LINE.sub(line, manifest, count=1))


def lock_contents(lockfile: Path) -> tuple:
    """A Cargo.lock's packages by (name, version, source), each with the (name, version) of its
    dependencies, and the rest of the file (its format version)."""
    lock = tomllib.loads(lockfile.read_text())
    entries = lock.pop("package", [])
    versions_by_name = {}
    for entry in entries:
        versions_by_name.setdefault(entry["name"], []).append(entry["version"])

    def dependency(reference: str) -> tuple:
        # "name", or "name version" (with " (source)") where the lock holds several versions.
        name, *version = reference.split(" ")
        return (name, version[0] if version else versions_by_name[name][0])

    packages = {
        (entry["name"], entry["version"], entry.get("source")): (
            entry.get("checksum"),
            {dependency(reference) for reference in entry.get("dependencies", [])},
        )
        for entry in entries
    }
    return packages, lock


def prune_lockfile(out: Path) -> None:
    """Removes from out/Cargo.lock (the repository's) what no crate of `out` uses, and stops if
    cargo changed anything else.

    A source install builds with `cargo build --locked` (node/scripts/build.mjs), which refuses a
    lock file that needs changes: the repository's lists the packages of every member, so the
    members left out here make it stale. Cargo resolves the pruned one offline from its cache,
    keeping each locked version; that it only removed packages and dependency edges (optional
    dependencies only the members left out enable) is checked here, so the install builds
    exactly the versions the repository's tests ran with.
    """
    lockfile = out / "Cargo.lock"
    before, before_rest = lock_contents(lockfile)
    cargo = os.environ.get("CARGO", "cargo")
    update = subprocess.run(
        [cargo, "update", "--workspace", "--offline"], cwd=out, capture_output=True, text=True
    )
    if update.returncode != 0:
        sys.exit(
            f"release/source_tree.py: cargo update --workspace --offline failed:\n{update.stderr}"
        )
    after, after_rest = lock_contents(lockfile)
    changed = []
    for key, (checksum, dependencies) in after.items():
        if key not in before:
            changed.append(f"{key[0]} {key[1]} added")
        elif checksum != before[key][0]:
            changed.append(f"{key[0]} {key[1]}: another checksum")
        elif not dependencies <= before[key][1]:
            changed.append(f"{key[0]} {key[1]}: depends on {sorted(dependencies - before[key][1])}")
    if changed or after_rest != before_rest:
        sys.exit(
            "release/source_tree.py: pruning Cargo.lock changed more than it removed: "
            + ("; ".join(sorted(changed)) or "its format")
        )
    print(
        f"release/source_tree.py: Cargo.lock: {len(before) - len(after)} packages no crate here "
        "uses removed, no version changed"
    )


def write_tree(members: list, out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    manifest = (ROOT / "Cargo.toml").read_text()
    (out / "Cargo.toml").write_text(workspace_manifest(manifest, members))
    shutil.copyfile(ROOT / "Cargo.lock", out / "Cargo.lock")
    for crate in members + PATCHED_CRATES:
        for name in crate_files(crate):
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, out / name)
    prune_lockfile(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", required=True, help="comma-separated crate folders")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    write_tree([m for m in args.members.split(",") if m], args.out)


if __name__ == "__main__":
    main()
