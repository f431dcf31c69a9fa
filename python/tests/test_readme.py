"""The root README's Python example, and python/README.md's runnable ones, run as written."""

import re
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
#: The binding's own README: most of its snippets use names of the reader's program; the ones
#: listed in BINDING_PRINTS are whole programs.
BINDING_README = Path(__file__).resolve().parents[1] / "README.md"

#: What the root README's one Python example prints.
README_PRINTS = ["holding nightly-report with token "]


def python_blocks(text: str) -> List[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


#: The binding README's runnable examples, by the text that starts their paragraph, with what
#: each prints.
BINDING_PRINTS = {
    "Distributed locks with fencing tokens": ["report written under fencing token"],
    "As a decorator": ["report for 2026-12-03 under fencing token"],
    "Semaphores and read-write locks": [
        "report running under a permit of 3",
        "config read under a read lease",
        "config written under fencing token",
    ],
    "Several names as one lock": [
        "holding ['account-17', 'account-4']",
        "account-17 written under fencing token",
    ],
}


def binding_example(paragraph: str) -> str:
    """The first Python example after `paragraph` in python/README.md."""
    after = BINDING_README.read_text(encoding="utf-8").split("\n" + paragraph, 1)[1]
    found = python_blocks(after)
    assert found, f"no Python example after {paragraph!r}"
    return str(found[0])


def run_example(code: str, prints: List[str], folder: Path) -> None:
    """Runs `code` in a Python of its own, in `folder` (where a relative SQLite URL points)."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=folder,
    )
    assert done.returncode == 0, done.stderr
    for line in prints:
        assert line in done.stdout, done.stdout


def test_readme_python_example_runs(tmp_path: Path) -> None:
    [example] = python_blocks(README.read_text(encoding="utf-8"))
    run_example(example, README_PRINTS, tmp_path)


@pytest.mark.parametrize(
    "paragraph", list(BINDING_PRINTS), ids=["fence", "decorator", "semaphore-and-rwlock", "many"]
)
def test_binding_readme_example_runs(paragraph: str, tmp_path: Path) -> None:
    run_example(binding_example(paragraph), BINDING_PRINTS[paragraph], tmp_path)
