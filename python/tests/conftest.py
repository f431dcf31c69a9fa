"""Shared fixtures: every test gets its own SQLite files in a temporary folder."""

import concurrent.futures
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Sequence, TypeVar

import pytest

import fencelock

# Generous margins everywhere: CI is a busy 2-core machine. No test asserts speed.
LONG = 30.0


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "locks.db"


@pytest.fixture
def url(db_path: Path) -> str:
    return f"sqlite://{db_path}"


@pytest.fixture
def data_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'data.db'}"


@pytest.fixture
def locker(url: str) -> Iterator[fencelock.Locker]:
    locker = fencelock.connect(url)
    yield locker
    locker.close()


@pytest.fixture
def rival(url: str) -> Iterator[fencelock.Locker]:
    """A second Locker on the same locks: another client to contend with. (One thread or task
    acquiring a name it already holds through the same Locker gets Deadlock, not a wait.)"""
    rival = fencelock.connect(url)
    yield rival
    rival.close()


T = TypeVar("T")


def in_another_thread(call: Callable[[], T]) -> T:
    """Runs `call` in a new thread (another scope) and returns what it returned or raised."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result(timeout=LONG)


def run_sql(path: Path, sql: str, params: Sequence[Any] = ()) -> List[List[Any]]:
    """Runs one statement with Python's sqlite3 module in a separate process; returns the rows
    (bytes come back as hex strings) and fails if the statement changed no row it should have.

    Never open a database with Python's sqlite3 in a process where fencelock has it open: they
    are two copies of the SQLite library, and closing one's file releases the other's POSIX
    locks, which lets SQLite delete a WAL file still in use (sqlite.org/howtocorrupt.html,
    section 2.2.1). Hence a child process.
    """
    code = (
        "import json, sqlite3, sys\n"
        "path, sql, params = json.loads(sys.stdin.read())\n"
        "params = [bytes.fromhex(p[4:]) if isinstance(p, str) and p.startswith('hex:') else p for p in params]\n"
        "con = sqlite3.connect(path, timeout=60)\n"
        "cur = con.execute(sql, params)\n"
        "rows = [[v.hex() if isinstance(v, bytes) else v for v in r] for r in cur.fetchall()]\n"
        "con.commit()\n"
        "print(json.dumps({'rows': rows, 'rowcount': cur.rowcount}))\n"
    )
    encoded = ["hex:" + p.hex() if isinstance(p, bytes) else p for p in params]
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([str(path), sql, encoded]),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    answer = json.loads(done.stdout)
    rows: List[List[Any]] = answer["rows"]
    if sql.lstrip().upper().startswith("UPDATE"):
        assert answer["rowcount"] >= 1, f"no row changed by {sql!r}"
    return rows


def take_over(db_path: Path, name: str) -> None:
    """Makes somebody else the owner of `name` behind fencelock's back, as an operator or a
    holder that found the lease expired would: the next renewal sees the lock is not ours."""
    run_sql(
        db_path,
        "UPDATE fencelock_locks SET owner = ?, token = token + 1 WHERE name = ?",
        [b"\x00" * 16, name.encode()],
    )


def python() -> str:
    return sys.executable


# The every-backend fixture: SQLite always; a server backend when its FENCELOCK_TEST_*_URL
# variable is set (as `tests/servers.sh env` prints).
SERVER_VARIABLES = [
    "FENCELOCK_TEST_REDIS_URL",
    "FENCELOCK_TEST_REDIS_CLUSTER_URL",
    "FENCELOCK_TEST_REDLOCK_URL",
    "FENCELOCK_TEST_ZK_URL",
    "FENCELOCK_TEST_POSTGRES_URL",
    "FENCELOCK_TEST_MARIADB_URL",
]


def backend_params() -> List[object]:
    params: List[object] = [pytest.param("sqlite", id="sqlite")]
    for var in SERVER_VARIABLES:
        backend = var[len("FENCELOCK_TEST_") : -len("_URL")].lower()
        if os.environ.get(var):
            params.append(pytest.param(os.environ[var], id=backend))
    return params


# CI sets FENCELOCK_REQUIRE_SERVERS=1: there a server that does not answer fails the test.
REQUIRE_SERVERS = os.environ.get("FENCELOCK_REQUIRE_SERVERS") == "1"

# A backend that cannot be used is tried once, not once per test.
_unusable: Dict[str, str] = {}


@pytest.fixture(params=backend_params())
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of each backend in turn (with its password: never show it)."""
    url: str = request.param
    return url if url != "sqlite" else f"sqlite://{tmp_path / 'locks.db'}"


def _connect_or_skip(url: str) -> fencelock.Locker:
    if url in _unusable:
        pytest.skip(_unusable[url])
    try:
        return fencelock.connect(url, operation_timeout=10)
    except fencelock.Unavailable as e:
        if REQUIRE_SERVERS:
            raise
        _unusable[url] = f"server not answering: {e}"
        pytest.skip(_unusable[url])


@pytest.fixture
def any_locker(any_url: str) -> Iterator[fencelock.Locker]:
    locker = _connect_or_skip(any_url)
    yield locker
    locker.close()


@pytest.fixture
def any_rival(any_url: str, any_locker: fencelock.Locker) -> Iterator[fencelock.Locker]:
    """A second Locker on `any_locker`'s backend: another client to contend with."""
    rival = _connect_or_skip(any_url)
    yield rival
    rival.close()


def native_test_hook(name: str) -> Callable[[], Any]:
    """A test-only entry point of the native module (`_test_panic`, `_test_panic_async`), which
    exists only in a build with the `test-hooks` feature, as python/run-tests.sh and CI build."""
    hook = getattr(fencelock._native, name, None)
    if hook is None:
        pytest.fail(f"{name}: the native module was built without the test-hooks feature")
    return hook
