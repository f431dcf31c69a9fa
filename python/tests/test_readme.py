"""The root README's Python example runs as written."""

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_example_runs() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Python", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README has no Python example"
    done = subprocess.run(
        [sys.executable, "-c", match.group(1)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "report written under fencing token" in done.stdout
