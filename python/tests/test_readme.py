"""The root README's Python examples, and python/README.md's runnable one, run as written."""

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

#: What each example of the README's Python section prints, in order: the mutex with a fence,
#: then the semaphore and the read-write lock.
PRINTS = [
    ["report written under fencing token"],
    [
        "report running under a permit of 3",
        "config read under a read lease",
        "config written under fencing token",
    ],
]


def python_examples() -> List[str]:
    section = README.read_text(encoding="utf-8").split("## Python", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


#: The binding README's runnable examples, by the text that starts their paragraph, with what
#: each prints.
BINDING_PRINTS = {
    "As a decorator": ["report for 2026-12-03 under fencing token"],
    "Several names as one lock": [
        "holding ['account-17', 'account-4']",
        "account-17 written under fencing token",
    ],
}


def binding_example(paragraph: str) -> str:
    """The first Python example after `paragraph` in python/README.md."""
    after = BINDING_README.read_text(encoding="utf-8").split("\n" + paragraph, 1)[1]
    found = re.findall(r"```python\n(.*?)```", after, re.S)
    assert found, f"no Python example after {paragraph!r}"
    return str(found[0])


def run_example(code: str, prints: List[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for line in prints:
        assert line in done.stdout, done.stdout


def test_the_readme_has_each_python_example() -> None:
    assert len(python_examples()) == len(PRINTS), "an example without its check, or none"


@pytest.mark.parametrize("index", range(len(PRINTS)), ids=["lock", "semaphore-and-rwlock"])
def test_readme_python_example_runs(index: int) -> None:
    run_example(python_examples()[index], PRINTS[index])


@pytest.mark.parametrize("paragraph", list(BINDING_PRINTS), ids=["decorator", "many"])
def test_binding_readme_example_runs(paragraph: str) -> None:
    run_example(binding_example(paragraph), BINDING_PRINTS[paragraph])
