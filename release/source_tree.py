#!/usr/bin/env python3
"""The Rust sources a source build compiles, as a cargo workspace of their own.

    release/source_tree.py --members core,cli,node --out DIR

Writes DIR/Cargo.toml (the repository's workspace manifest with only MEMBERS), DIR/Cargo.lock
(the repository's: cargo drops the entries of the members left out, and pins every other
version), the files git tracks of each member crate, and the patched ZooKeeper client that the
workspace's [patch.crates-io] points at. The npm package ships this tree (release/npm-stage.mjs)
for platforms without a prebuilt module; release/sdist.py uses the same pieces for the Python
sdist.
"""

import argparse
import re
import shutil
import subprocess
import sys
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", required=True, help="comma-separated crate folders")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    write_tree([m for m in args.members.split(",") if m], args.out)


if __name__ == "__main__":
    main()
