#!/usr/bin/env python3
"""Checks the links and the named constants of README.md and docs/*.md.

- Every relative link (`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`) resolves to a
  file or folder of the repository, and its `#anchor`, if any, to a heading of that file, by
  GitHub's rules for heading anchors (lowercase; punctuation dropped but `-` and `_`; spaces
  become `-`; a repeated heading gets `-1`, `-2`, ...).
- Every backticked UPPER_SNAKE_CASE identifier with an underscore (`LIST_LIMIT`,
  `MAX_PERMITS`) names something the sources have: a doc that names a constant instead of
  restating its number must name one that exists. `FENCELOCK_*` variables are left to
  tests/check-env-vars.py.

Fails (exit 1) with one `file:line: problem` per problem.

    python3 tests/check-doc-links.py [ROOT]

ROOT defaults to the repository this script is in. Standard library only; run by tests/lint.sh.
"""

import os
import re
import sys
from pathlib import Path
from urllib.parse import unquote

from hand_written import SKIPPED_DIRS

# The sources a named constant may come from: shipped code, tests, scripts and settings.
SOURCE_SUFFIXES = {".rs", ".py", ".js", ".mjs", ".kt", ".java", ".sh", ".toml"}


# Backticked words in the docs that look like constants but are not the project's code, each
# with the reason. Empty today: add a word only with a comment saying what it is.
NOT_CODE: dict = {}

# A link or image: [text](target) or [text](target "title"); the text may hold one level of
# brackets (`[a [b] c](x)`).
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
CONSTANT = re.compile(r"`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def docs(root: Path):
    """README.md and docs/*.md."""
    yield root / "README.md"
    yield from sorted((root / "docs").glob("*.md"))


def prose_lines(text: str):
    """(line number, line) of the lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def rendered(heading: str) -> str:
    """A heading's text as GitHub renders it: links become their text, code and emphasis marks
    go."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("`", "").replace("*", "")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, every character but letters, digits, `_`, `-`
    and spaces dropped, each space a `-`."""
    text = rendered(heading).strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in "_- ")
    return text.replace(" ", "-")


def anchors(path: Path) -> set:
    """The anchors of a Markdown file's headings, repeated ones numbered as GitHub numbers them."""
    seen: dict = {}
    found = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def link_problems(root: Path, doc: Path, text: str):
    for number, line in prose_lines(text):
        # Inline code is not a link: `[a](b)` in backticks is shown, not followed.
        line = re.sub(r"`[^`]*`", "", line)
        for match in LINK.finditer(line):
            target = match.group(1)
            if SCHEME.match(target) or target.startswith("//"):
                continue  # a URL or a mailto: outside the repository
            path_part, _, anchor = target.partition("#")
            path_part = unquote(path_part)
            if path_part:
                resolved = (doc.parent / path_part).resolve()
                try:
                    resolved.relative_to(root.resolve())
                except ValueError:
                    yield number, f"{target}: points outside the repository"
                    continue
                if not resolved.exists():
                    yield number, f"{target}: no such file"
                    continue
            else:
                resolved = doc
            if not anchor:
                continue
            if resolved.is_dir() or resolved.suffix != ".md":
                yield number, f"{target}: an anchor into something that is not a Markdown file"
            elif unquote(anchor) not in anchors(resolved):
                yield (
                    number,
                    f"{target}: {resolved.relative_to(root.resolve())} has no heading #{anchor}",
                )


def source_words(root: Path) -> set:
    """Every UPPER_SNAKE_CASE word of the sources."""
    words = set()
    word = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in names:
            path = Path(folder) / name
            if path.suffix in SOURCE_SUFFIXES:
                words.update(word.findall(path.read_text(encoding="utf-8", errors="replace")))
    return words


def constant_problems(text: str, known: set):
    for number, line in prose_lines(text):
        for name in CONSTANT.findall(line):
            if name.startswith("FENCELOCK_") or name in NOT_CODE or name in known:
                continue
            yield number, f"`{name}` looks like a constant, but no source file names it"


def main(argv) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    root = root.resolve()
    known = source_words(root)
    problems = []
    checked = 0
    for doc in docs(root):
        text = doc.read_text(encoding="utf-8")
        checked += 1
        where = doc.relative_to(root)
        problems += [f"{where}:{n}: {what}" for n, what in link_problems(root, doc, text)]
        problems += [f"{where}:{n}: {what}" for n, what in constant_problems(text, known)]
    for problem in problems:
        print(problem)
    if problems:
        print(
            f"check-doc-links: {len(problems)} problem(s) in README.md and docs/*.md",
            file=sys.stderr,
        )
        return 1
    print(
        f"check-doc-links: the links and named constants of {checked} files resolve "
        "(README.md, docs/*.md)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
