#!/usr/bin/env python3
"""Fails on an import circle between files of core/src that tests/import-circles.allow does not
name.

A circle is a set of files each of which reaches the others through `use crate::…`,
`use super::…`, `use self::…` lines and `crate::…`/`super::…` paths in code. Two kinds of
edge are left out: a file's use of the module that declares it or any module above it (a child
reading its parent's types is how Rust folders work), and a module file's use of its own
children. Test modules (`#[cfg(test)] mod … { … }`) and comments are not read.

Usage: python3 tests/check-import-circles.py [ROOT]   (ROOT defaults to core/src)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ALLOWLIST = REPO / "tests" / "import-circles.allow"

USE_START = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+((?:crate|super|self)\b[^;]*);", re.S | re.M
)
INLINE_PATH = re.compile(r"\b((?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def strip_comments_and_strings(text: str) -> str:
    """Blanks comments and string literals, keeping line breaks and braces elsewhere."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif (
            c == "r"
            and re.match(r'r#*"', text[i : i + 10])
            and (i == 0 or not text[i - 1].isalnum())
        ):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = '"' + hashes
            j = text.find(end, i + len(hashes) + 2)
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i : i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", text[i : i + 4])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_modules(code: str) -> str:
    """Removes `#[cfg(test)]` modules (brace-matched)."""
    while True:
        m = re.search(
            r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", code
        )
        if not m:
            return code
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        code = code[: m.start()] + code[j:]


def module_of(path: Path, root: Path) -> tuple[str, ...]:
    rel = path.relative_to(root).with_suffix("")
    parts = rel.parts
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def expand_use(tree: str) -> list[str]:
    """`a::{b, c::{d, e}}` → ['a::b', 'a::c::d', 'a::c::e'] (aliases and globs kept as paths)."""
    tree = re.sub(r"\s+", "", tree)
    m = re.match(r"^(.*?)::\{(.*)\}$", tree)
    if not m:
        return [re.sub(r"as\w+$", "", tree)]
    prefix, inner = m.groups()
    items, depth, start = [], 0, 0
    for i, c in enumerate(inner):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(inner[start:i])
            start = i + 1
    items.append(inner[start:])
    paths = []
    for item in filter(None, items):
        if item == "self":
            paths.append(prefix)
        else:
            paths.extend(expand_use(f"{prefix}::{item}"))
    return paths


def resolve(path: str, here: tuple[str, ...], is_mod_file: bool) -> tuple[str, ...] | None:
    parts = path.split("::")
    # `self` and `super` count from the module the file *is*: a mod.rs is its folder's module.
    if parts[0] == "crate":
        base: tuple[str, ...] = ()
        parts = parts[1:]
    else:
        base = here
        while parts and parts[0] in ("self", "super"):
            if parts[0] == "super":
                if not base:
                    return None
                base = base[:-1]
            parts = parts[1:]
    return base + tuple(parts)


def main() -> int:
    root = (Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "core" / "src").resolve()
    files = sorted(root.rglob("*.rs"))
    modules = {module_of(f, root): f for f in files}
    edges: dict[Path, set[Path]] = {f: set() for f in files}
    for f in files:
        here = module_of(f, root)
        is_mod_file = f.stem in ("mod", "lib", "main")
        code = drop_test_modules(strip_comments_and_strings(f.read_text()))
        paths = [p for m in USE_START.finditer(code) for p in expand_use(m.group(1))]
        paths += INLINE_PATH.findall(USE_START.sub("", code))
        for p in paths:
            target = resolve(p, here, is_mod_file)
            while target is not None and target not in modules and target:
                target = target[:-1]
            if target is None:
                continue
            to = modules.get(target)
            if to is None or to == f:
                continue
            # A child's use of a module above it, or a module's use of one below it.
            if here[: len(target)] == target or target[: len(here)] == here:
                continue
            edges[f].add(to)
    circles = strongly_connected(edges)
    allowed = read_allowlist()
    found = {frozenset(str(p.relative_to(REPO)) for p in c) for c in circles}
    new = [c for c in found if c not in allowed]
    for c in sorted(found, key=sorted):
        mark = "allowed" if c in allowed else "NEW"
        print(f"  {mark}: {' <-> '.join(sorted(c))}")
    gone = [c for c in allowed if c not in found]
    for c in gone:
        print(
            f"  no longer a circle (remove it from {ALLOWLIST.relative_to(REPO)}): {' <-> '.join(sorted(c))}"
        )
    if new or gone:
        print(
            f"check-import-circles: {len(new)} new circle(s) between files of {root.relative_to(REPO)}; "
            f"open them (docs/design.md's layout), or, for two files that are one unit, "
            f"name them in {ALLOWLIST.relative_to(REPO)} with the reason"
        )
        return 1
    print(
        f"check-import-circles: no new circle between the files of {root.relative_to(REPO)} "
        f"({len(found)} allowed)"
    )
    return 0


def read_allowlist() -> set[frozenset[str]]:
    """One circle per line: its files separated by spaces; `#` starts a comment."""
    allowed = set()
    for line in ALLOWLIST.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            allowed.add(frozenset(line.split()))
    return allowed


def strongly_connected(edges: dict[Path, set[Path]]) -> list[set[Path]]:
    """Tarjan's algorithm, iterative; only components of two files or more."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on_stack: set[Path] = set()
    result = []
    counter = 0
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.add(w)
                    if w == node:
                        break
                if len(component) > 1:
                    result.append(component)
    return result


if __name__ == "__main__":
    sys.exit(main())
