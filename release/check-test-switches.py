#!/usr/bin/env python3
"""No test-only switch reaches a release: run by release/build.sh after every build.

A test-only switch is a cargo feature that exists for the test suites and must never ship:
- `fault-injection-disable-fencing` (core): turns the fence's checks off, for the fault suite's
  deliberately broken worker;
- `fault-injection-duplicate-scripts` (core): the Redis backend sends every lock script twice,
  for core/tests/it/redis/lock.rs's run as a replaying client;
- `test-hooks` (each binding): entry points that panic on purpose (`_testPanic`, ...).

Two checks, each against every switch listed in SWITCHES (a switch added later goes there):
1. Feature resolution: the packages release/build.sh builds, resolved by `cargo tree` without the
   features that CI's build adds, turn no switch on. This is what a `--profile dist` build gets,
   and it holds whatever profile was just built.
2. The artifacts in DIST: every native file (in the wheel, the npm tarballs, the jar, the CLI
   tarball) is searched for each switch's marker, a string compiled in only with the switch, and
   the declared API (`_native.pyi`, `index.d.ts`) for the hook names. In a `dist` build no marker
   may appear. CI's `ci` build turns `test-hooks` on for the language suites, which test those
   very artifacts: there each binding's module must contain its marker (which also shows that
   the search sees into every artifact), and the fault-injection switches must still be absent.

    release/check-test-switches.py DIST --profile dist|ci|dev
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Switch:
    feature: str  # the cargo feature, as `cargo tree -e features` prints it
    marker: bytes  # a string in the compiled code only when the feature is on
    # Profiles whose build turns it on for the bindings (so their modules must carry it).
    on_in_profiles: tuple[str, ...]


SWITCHES = [
    Switch("fault-injection-disable-fencing", b"FENCELOCK_FAULT_INJECTION_DISABLE_FENCING", ()),
    Switch("fault-injection-duplicate-scripts", b"FENCELOCK_FAULT_INJECTION_DUPLICATE_SCRIPTS", ()),
    Switch("test-hooks", b"test panic requested by", ("ci", "dev")),
]

# The names of the test hooks, which the declared API of a package must never contain.
HOOK_NAMES = [b"_test_panic", b"_testPanic", b"testPanic"]

# The cargo builds of release/build.sh, without CI's features: one for the command, the Node
# module and the JVM library together, one for the wheel.
RELEASE_BUILDS = [
    ["-p", "fencelock-cli", "-p", "fencelock-node", "-p", "fencelock-jvm"],
    ["-p", "fencelock-python"],
]


def fail(message: str) -> None:
    print(f"check-test-switches: {message}", file=sys.stderr)
    sys.exit(1)


def check_feature_resolution() -> None:
    for packages in RELEASE_BUILDS:
        out = subprocess.run(
            ["cargo", "tree", "--locked", "-e", "features", "--prefix", "none", "-f", "{p} [{f}]"]
            + packages,
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        for switch in SWITCHES:
            if switch.feature in out:
                lines = [line for line in out.splitlines() if switch.feature in line]
                fail(f"`{switch.feature}` is on in a release build of {packages}: {lines[:3]}")
    print(f"   feature resolution of {len(RELEASE_BUILDS)} release builds: no test-only feature")


def members(artifact: Path):
    """(name, bytes) of every file inside a wheel, jar or tarball."""
    if artifact.suffix in (".whl", ".jar"):
        with zipfile.ZipFile(artifact) as z:
            for info in z.infolist():
                if not info.is_dir():
                    yield info.filename, z.read(info)
    elif artifact.name.endswith((".tgz", ".tar.gz")):
        with tarfile.open(artifact) as t:
            for info in t.getmembers():
                if info.isfile():
                    yield info.name, t.extractfile(info).read()
    elif artifact.suffix == ".pom":
        # The POM declares dependencies only; nothing to search.
        return
    else:
        fail(f"unknown artifact type {artifact.name}")


def is_binding_module(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return (
        base.startswith("_native")
        and base.endswith(".so")  # the wheel's extension module
        or base.endswith(".node")  # the npm platform package's module
        or base == "libfencelock_jvm.so"  # inside the jar
    )


def check_artifacts(dist: Path, profile: str) -> None:
    artifacts = sorted(
        p for p in dist.iterdir() if p.name.endswith((".whl", ".jar", ".tgz", ".tar.gz", ".pom"))
    )
    if not artifacts:
        fail(f"no artifacts in {dist}")
    native_files = 0
    modules_seen: list[str] = []
    for artifact in artifacts:
        for name, data in members(artifact):
            where = f"{artifact.name}:{name}"
            if name.endswith((".pyi", ".d.ts")):
                for hook in HOOK_NAMES:
                    if hook in data:
                        fail(f"{where} declares the test hook {hook.decode()}")
            if not data.startswith(b"\x7fELF"):
                continue
            native_files += 1
            module = is_binding_module(name)
            if module:
                modules_seen.append(where)
            for switch in SWITCHES:
                present = switch.marker in data
                expected = module and profile in switch.on_in_profiles
                if present and not expected:
                    fail(f"{where} contains `{switch.feature}` (profile {profile})")
                if expected and not present:
                    fail(
                        f"{where} lacks `{switch.feature}`, which the {profile} build turns on "
                        "for the test suites: the build or this check is out of date"
                    )
    if len(modules_seen) != 3:
        fail(f"expected the wheel's, npm's and the jar's native modules, found {modules_seen}")
    print(
        f"   {len(artifacts)} artifacts, {native_files} native files: "
        + (
            "no test-only switch"
            if profile == "dist"
            else f"test-hooks in the 3 binding modules only (profile {profile}), nothing else"
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", type=Path)
    parser.add_argument("--profile", required=True, choices=["dist", "ci", "dev"])
    args = parser.parse_args()
    check_feature_resolution()
    check_artifacts(args.dist, args.profile)


if __name__ == "__main__":
    main()
