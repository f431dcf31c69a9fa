"""The ``fencelock`` command installed with the package: the compiled binary, exec'd by the
console script and by ``python -m fencelock``, so Python sits between nothing and nobody."""

import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
from conftest import LONG

import fencelock
from fencelock import _cli

# The console script pip installed next to this interpreter (the test venv's bin/).
SCRIPT = Path(sys.executable).parent / "fencelock"

LAUNCHERS = {
    "console script": [str(SCRIPT)],
    "python -m": [sys.executable, "-m", "fencelock"],
}


@pytest.fixture(params=sorted(LAUNCHERS))
def launcher(request: pytest.FixtureRequest) -> List[str]:
    return LAUNCHERS[request.param]


def test_the_package_ships_the_compiled_command() -> None:
    binary = Path(_cli.binary_path())
    assert binary.parent.parent == Path(fencelock.__file__).parent
    assert os.access(binary, os.X_OK)
    # An ELF executable, not a Python script standing in for one.
    assert binary.read_bytes()[:4] == b"\x7fELF"
    assert SCRIPT.exists(), "pip did not install the fencelock console script"


def test_version_matches_the_package(launcher: List[str]) -> None:
    done = subprocess.run([*launcher, "--version"], capture_output=True, text=True, timeout=LONG)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["fencelock", fencelock.__version__]


def test_run_holds_the_lock_and_execs_without_python_in_between(
    launcher: List[str], url: str
) -> None:
    """CMD's parent is the process the launcher started: the script exec'd the binary."""
    probe = (
        "import os, sys; "
        "print(os.environ['FENCELOCK_NAME'], os.environ['FENCELOCK_TOKEN'], os.getppid()); "
        "sys.exit(7)"
    )
    process = subprocess.Popen(
        [*launcher, "run", "--url", url, "nightly", "--", sys.executable, "-c", probe],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = process.communicate(timeout=LONG)
    assert process.returncode == 7, stderr  # CMD's own exit code comes back
    name, token, parent = stdout.split()
    assert name == "nightly"
    assert int(token) > 0
    assert int(parent) == process.pid

    # The lock was released when CMD ended: this Locker takes it at once, with a later token.
    with fencelock.connect(url) as locker:
        lease = locker.try_acquire("nightly")
        assert lease is not None
        assert lease.token > int(token)
        lease.release()


def test_usage_errors_come_from_the_command(launcher: List[str]) -> None:
    done = subprocess.run([*launcher, "run"], capture_output=True, text=True, timeout=LONG)
    assert done.returncode == 125
    assert "Usage" in done.stderr or "usage" in done.stderr


def test_a_missing_binary_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cli, "_PACKAGED", tmp_path / "nowhere" / "fencelock")
    with pytest.raises(FileNotFoundError, match="missing from this installation"):
        _cli.binary_path()
