#!/usr/bin/env python3
"""Checks that every citation of the design resolves to a section of docs/design.md.

Code comments, docstrings, stubs, `.d.ts` files, KDoc and the docs cite the design by number
("docs/design.md §3.2", "design §6", "design section 10"). This fails (exit 1, one
`file:line` per problem) when such a citation names a section that has no numbered heading in
docs/design.md, when docs/design.md refers to one of its own sections that does not exist, or
when a text points at the design document that lived outside the repository (a path into the
sibling `shared` folder), which users of the packages cannot read.

A citation must also name the file ("docs/design.md §3.2", or "design.md §3.2" from inside
docs/): a bare "design §4" is how references to the outside document were written, and its
numbers meant other sections than this file's.

    python3 tests/check-design-refs.py [ROOT]

ROOT defaults to the repository this script is in. Standard library only; run by tests/lint.sh.
"""

import os
import re
import sys
from pathlib import Path

from hand_written import SKIPPED_DIRS

DESIGN = Path("docs") / "design.md"

# The file types that carry prose a user or a developer reads.
SUFFIXES = {
    ".rs",
    ".py",
    ".pyi",
    ".ts",
    ".mts",
    ".cts",
    ".js",
    ".mjs",
    ".cjs",
    ".kt",
    ".kts",
    ".java",
    ".md",
    ".sh",
    ".toml",
}


# "design §3", "design.md §3.2", "design's §8", "design section 7", "design.md sections 3":
# any spelling that cites the design document by section number.
CITATION = re.compile(
    r"\bdesign(?:\.md)?(?:'s)?\s*(?:§|\bsections?\b)\s*(\d+(?:\.\d+)*)",
    re.IGNORECASE,
)
# The spelling that names this repository's file: "docs/design.md §3", "design.md §3".
NAMED = re.compile(r"design\.md\s*§\s*\d")
# Inside docs/design.md itself, a bare "§4" refers to its own section 4.
SELF_REFERENCE = re.compile(r"§\s*(\d+(?:\.\d+)*)")
# The design document that lived next to the repository, outside it.
OUTSIDE = re.compile(r"\.\./shared\b|\bshared/design\.md\b")
# A numbered heading: "## 3. Backends", "### 3.2 Redis".
HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s")


def sections(design: Path) -> set:
    """The section numbers that have a heading in docs/design.md."""
    numbers = set()
    for line in design.read_text(encoding="utf-8").splitlines():
        match = HEADING.match(line)
        if match:
            numbers.add(match.group(1))
    return numbers


def files(root: Path):
    """Every file of a checked type under root, outside build output and dependencies."""
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(names):
            path = Path(folder) / name
            if path.suffix in SUFFIXES:
                yield path


def problems(root: Path):
    """Yields (path, line number, what is wrong) for every citation that does not resolve."""
    design = root / DESIGN
    if not design.is_file():
        yield DESIGN, 0, "the design document is missing"
        return
    known = sections(design)
    me = Path(__file__).resolve()
    for path in files(root):
        if path.resolve() == me:
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            yield path.relative_to(root), 0, f"cannot read: {e}"
            continue
        is_design = path.resolve() == design.resolve()
        pattern = SELF_REFERENCE if is_design else CITATION
        for number, line in enumerate(text.splitlines(), start=1):
            if OUTSIDE.search(line):
                yield (
                    path.relative_to(root),
                    number,
                    "points at the design outside the repository; cite docs/design.md §N",
                )
            for match in pattern.finditer(line):
                section = match.group(1)
                if section not in known:
                    yield (
                        path.relative_to(root),
                        number,
                        f"cites §{section}, which has no heading in {DESIGN}",
                    )
                elif not is_design and not NAMED.match(match.group(0)):
                    yield (
                        path.relative_to(root),
                        number,
                        f"{match.group(0)!r}: cite as '{DESIGN} §N', N a section of that file",
                    )


def main(argv) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    found = list(problems(root))
    for path, number, what in found:
        print(f"{path}:{number}: {what}")
    if found:
        print(
            f"check-design-refs: {len(found)} problem(s); a citation names {DESIGN} and one "
            "of its numbered headings",
            file=sys.stderr,
        )
        return 1
    print(f"check-design-refs: every citation of {DESIGN} resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
