#!/usr/bin/env python3
"""Checks that docs/security.md lists every `FENCELOCK_*` environment variable the shipped
artifacts name, and names none they do not.

The shipped sources are the core, the command, and the Python, Node and JVM packages as users
install them (install and build scripts included); tests, benchmarks and release tooling are
not shipped. A variable counts as listed when docs/security.md names it in backticks. Fails
(exit 1) with one line per problem.

    python3 tests/check-env-vars.py [ROOT]

ROOT defaults to the repository this script is in. Standard library only; run by tests/lint.sh.
"""

import re
import sys
from pathlib import Path

SECURITY = Path("docs") / "security.md"

# What users install, and what builds it on their machines.
SHIPPED = [
    "core/src",
    "cli/src",
    "python/src",
    "python/fencelock",
    "python/build.rs",
    "node/lib",
    "node/bin",
    "node/scripts",
    "node/index.js",
    "node/index.d.ts",
    "bindings/jvm/src/main",
    "bindings/jvm/shedlock/src/main",
    "bindings/jvm/spring/src/main",
]
SUFFIXES = {".rs", ".py", ".pyi", ".js", ".mjs", ".cjs", ".ts", ".kt", ".java"}
VARIABLE = re.compile(r"\bFENCELOCK_[A-Z0-9_]*[A-Z0-9]\b")


def shipped_files(root: Path):
    for entry in SHIPPED:
        path = root / entry
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from (p for p in sorted(path.rglob("*")) if p.suffix in SUFFIXES and p.is_file())


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    named: dict[str, str] = {}
    for path in shipped_files(root):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for variable in VARIABLE.findall(line):
                named.setdefault(variable, f"{path.relative_to(root)}:{number}")
    listed = set(re.findall(r"`(FENCELOCK_[A-Z0-9_]+)`", (root / SECURITY).read_text()))
    problems = [
        f"{where}: {variable} is read or set by a shipped artifact but {SECURITY} does not list it"
        for variable, where in sorted(named.items())
        if variable not in listed
    ] + [
        f"{SECURITY}: lists {variable}, which no shipped source names"
        for variable in sorted(listed - named.keys())
    ]
    for problem in problems:
        print(problem)
    if not problems:
        print(f"check-env-vars: {SECURITY} lists the {len(named)} FENCELOCK_* variables shipped")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
