"""The root README's Python examples run as written."""

import re
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"

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


def test_the_readme_has_each_python_example() -> None:
    assert len(python_examples()) == len(PRINTS), "an example without its check, or none"


@pytest.mark.parametrize("index", range(len(PRINTS)), ids=["lock", "semaphore-and-rwlock"])
def test_readme_python_example_runs(index: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", python_examples()[index]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for line in PRINTS[index]:
        assert line in done.stdout, done.stdout
