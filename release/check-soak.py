#!/usr/bin/env python3
"""Refuses a release whose last soak is older than the last change to what it ships.

The soak (`tests/faults/run.sh soak`) is CI's overflow: each language's suite on every backend,
the Redis scripts sent twice, 200 Python exits, 16 clients per backend. CI does not run it, so a
release is the moment it must have run: on the commit being released, or on one after the last
change to the core, the command or a binding. Its record is tests/faults/summary.json
(`run.sh record` writes it); this reads the soak's `last_passed` and `last_failed` there.

    python3 release/check-soak.py [ROOT]

Exit 0 with one line saying which soak covers the release; exit 1 with what to run otherwise.
release/build.sh runs it for a release build (profile dist), not for CI's test builds.
Standard library and git only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

SUMMARY = Path("tests") / "faults" / "summary.json"

# What a release is built from: a change here needs a new soak. The core whole (its tests
# included: they state the contract the soak's suites rely on), the command, each binding's
# shipped sources and manifests, and the lock file that pins every dependency.
SHIPPED = [
    "core",
    "cli",
    "Cargo.toml",
    "Cargo.lock",
    "python/src",
    "python/fencelock",
    "python/Cargo.toml",
    "python/pyproject.toml",
    "node/src",
    "node/lib",
    "node/bin",
    "node/index.js",
    "node/index.d.ts",
    "node/Cargo.toml",
    "node/package.json",
    "bindings/jvm/src/main",
    "bindings/jvm/Cargo.toml",
    "bindings/jvm/pom.xml",
    "bindings/jvm/shedlock/src/main",
    "bindings/jvm/spring/src/main",
]

RUN = "FENCELOCK_FAULTS_RECORD=1 tests/faults/run.sh soak"


class Refused(Exception):
    pass


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def _full(root: Path, rev: str) -> Optional[str]:
    r = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    return r.stdout.strip() or None if r.returncode == 0 else None


def _contains(root: Path, descendant: str, ancestor: str) -> bool:
    return _git(root, "merge-base", "--is-ancestor", ancestor, descendant).returncode == 0


def covering_soak(root: Path) -> str:
    """The commit of the passing soak that covers HEAD's shipped code; Refused otherwise."""
    if _git(root, "rev-parse", "--git-dir").returncode != 0:
        raise Refused("not a git checkout: a release is built from one, so its soak can be checked")
    path = root / SUMMARY
    soak = json.loads(path.read_text()).get("profiles", {}).get("soak", {}) if path.exists() else {}
    passed = soak.get("last_passed")
    if not passed:
        raise Refused(f"{SUMMARY} records no passing soak")
    commit = str(passed["commit"])
    if commit.endswith("-dirty"):
        raise Refused(f"the last passing soak ran on uncommitted changes to {commit[:-6]}")
    soak_commit = _full(root, commit)
    if soak_commit is None:
        raise Refused(f"the last passing soak ran on {commit}, which this checkout does not have")
    failed = soak.get("last_failed")
    if failed:
        failed_commit = _full(root, str(failed["commit"]).removesuffix("-dirty"))
        later = failed_commit is not None and failed_commit != soak_commit
        if later and _contains(root, failed_commit, soak_commit):
            raise Refused(
                f"the soak failed on {failed['commit']} ({failed['date']}), after it passed"
            )
    changed = _git(root, "log", "-1", "--format=%H", "HEAD", "--", *SHIPPED).stdout.strip()
    if changed and not _contains(root, soak_commit, changed):
        short = _git(root, "log", "-1", "--format=%h %s", changed).stdout.strip()
        raise Refused(f"the last passing soak ({commit}, {passed['date']}) is older than {short}")
    return f"{commit}, {passed['date']}"


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    try:
        covered = covering_soak(root)
    except Refused as e:
        print(
            f"release: refused: {e}. Run `{RUN}` and commit tests/faults/summary.json and "
            "tests/FAULTS.md.",
            file=sys.stderr,
        )
        return 1
    print(f"release: the soak of {covered} covers the shipped code")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
