#!/usr/bin/env python3
"""Builds the Python source distribution, dist/fencelock-V.tar.gz, for machines no wheel fits.

    release/sdist.py --out DIR [--maturin PATH]

`maturin sdist` packs the extension's crate and the path crates it depends on (the core), but
not the two other crates a source build needs: the `fencelock` command (cli/), which
python/build.rs compiles into the package, and the patched ZooKeeper client that the workspace's
[patch.crates-io] points at (third_party/zookeeper-client). This adds both, from the files git
tracks, and makes cli/ a member of the sdist's workspace again. Compiled files never go in:
the sdist is sources only, and `pip install` compiles them with the user's Rust toolchain.
"""

import argparse
import gzip
import io
import subprocess
import tarfile
import tempfile
from pathlib import Path

from source_tree import PATCHED_CRATES, ROOT, crate_files, workspace_manifest

# Members of the sdist's workspace: maturin's (the core and the extension) and the command.
MEMBERS = ["core", "python", "cli"]


def add_bytes(archive: tarfile.TarFile, template: tarfile.TarInfo, data: bytes) -> None:
    info = tarfile.TarInfo(template.name)
    info.mode, info.mtime = template.mode, template.mtime
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def complete(maturin_sdist: Path, out: Path) -> None:
    prefix = maturin_sdist.name[: -len(".tar.gz")]
    with (
        tarfile.open(maturin_sdist) as source,
        tarfile.open(fileobj=gzip.GzipFile(out, "wb", mtime=0), mode="w") as target,
    ):
        for member in source.getmembers():
            relative = member.name[len(prefix) + 1 :]
            if "/_bin/" in f"/{relative}":
                continue  # a command compiled here would not run where sources are needed
            data = source.extractfile(member) if member.isfile() else None
            if relative == "Cargo.toml":
                manifest = workspace_manifest(data.read().decode(), MEMBERS)
                add_bytes(target, member, manifest.encode())
            else:
                target.addfile(member, data)
        for crate in ["cli", *PATCHED_CRATES]:
            for name in crate_files(crate):
                info = target.gettarinfo(str(ROOT / name), arcname=f"{prefix}/{name}")
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                with open(ROOT / name, "rb") as content:
                    target.addfile(info, content)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--maturin", default="maturin")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(
            [
                args.maturin,
                "sdist",
                "--manifest-path",
                str(ROOT / "python" / "Cargo.toml"),
                "--out",
                scratch,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (made,) = Path(scratch).glob("*.tar.gz")
        args.out.mkdir(parents=True, exist_ok=True)
        complete(made, args.out / made.name)
        print(args.out / made.name)


if __name__ == "__main__":
    main()
