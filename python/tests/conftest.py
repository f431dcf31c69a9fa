"""Shared fixtures: every test gets its own SQLite files in a temporary folder; the server
backends are those of `tests/servers.sh env` that FENCELOCK_TEST_BACKENDS selects.

Run by python/run-tests.sh, which builds the package (with its test hooks) first. A pytest run
in a Python without that package stops at once, saying so (pytest_configure below), rather than
failing every test module on its import.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

import pytest

try:
    import fencelock
except ImportError as error:
    _IMPORT_ERROR: Optional[ImportError] = error
else:
    _IMPORT_ERROR = None

# Generous margins everywhere: CI is a busy 2-core machine. No test asserts speed.
LONG = 30.0

#: The package's sources (python/fencelock), which have no compiled module of their own.
SOURCES = Path(__file__).resolve().parents[1] / "fencelock"

#: What to run instead, said by every stop below.
HOW_TO_RUN = (
    "run python/run-tests.sh from the repository root: it builds the package with its test "
    "hooks into target/py-venv and runs these tests there (its arguments go to pytest); after "
    "that, target/py-venv/bin/pytest python/tests runs them again without a build"
)


def _why_fencelock_cannot_be_tested() -> Optional[str]:
    if _IMPORT_ERROR is not None:
        spec = importlib.util.find_spec("fencelock")
        origin = Path(spec.origin).resolve().parent if spec and spec.origin else None
        if origin == SOURCES:
            return (
                f"this Python ({sys.executable}) imports fencelock from its sources in {SOURCES}, "
                f"which have no compiled module ({_IMPORT_ERROR}; `python -m pytest` puts the "
                f"current folder first on sys.path): {HOW_TO_RUN}"
            )
        return (
            f"the fencelock package is not installed in this Python ({sys.executable}): "
            f"{HOW_TO_RUN}"
        )
    if not hasattr(fencelock._native, "_test_panic"):
        return (
            f"the fencelock package in this Python ({Path(fencelock.__file__).parent}) was built "
            f"without the test hooks (the test-hooks feature): {HOW_TO_RUN}"
        )
    return None


def pytest_configure(config: pytest.Config) -> None:
    problem = _why_fencelock_cannot_be_tested()
    if problem is not None:
        pytest.exit(problem, returncode=pytest.ExitCode.USAGE_ERROR)
    _check_the_backends()


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


# ---- the backends -------------------------------------------------------------------------------

#: The server backends by the names FENCELOCK_TEST_BACKENDS takes (the Node and JVM suites read
#: the same variable), each with the variable of its test server's URL (`tests/servers.sh env`)
#: and its id in the names of the tests here.
SERVERS: Dict[str, Tuple[str, str]] = {
    "redis": ("FENCELOCK_TEST_REDIS_URL", "redis"),
    "redis-cluster": ("FENCELOCK_TEST_REDIS_CLUSTER_URL", "redis_cluster"),
    "redlock": ("FENCELOCK_TEST_REDLOCK_URL", "redlock"),
    "zookeeper": ("FENCELOCK_TEST_ZK_URL", "zk"),
    "postgres": ("FENCELOCK_TEST_POSTGRES_URL", "postgres"),
    "mariadb": ("FENCELOCK_TEST_MARIADB_URL", "mariadb"),
}
BACKENDS: List[str] = ["sqlite", *SERVERS]

#: SQLite, and the backends Python reaches the core by a path of its own: Redis (I/O the caller
#: drives) and ZooKeeper (sessions). What CI tests (CONTRIBUTING.md, "Which tests run where").
BINDING_PATHS = ("sqlite", "redis", "zookeeper")

# CI sets FENCELOCK_REQUIRE_SERVERS=1: there a server that does not answer fails the test.
REQUIRE_SERVERS = os.environ.get("FENCELOCK_REQUIRE_SERVERS") == "1"

_LISTED = os.environ.get("FENCELOCK_TEST_BACKENDS", "")
_GIVEN = [name.strip() for name in _LISTED.split(",") if name.strip()]
#: The backends FENCELOCK_TEST_BACKENDS lists, or every one when it is unset or empty. The core's
#: conformance suite runs the lock contract on every backend; the suites of the languages test
#: what each adds, so CI lists a few, and the soak runs the full matrix.
SELECTED = {name for name in _GIVEN if name in BACKENDS} if _GIVEN else set(BACKENDS)


def _check_the_backends() -> None:
    """A misspelt FENCELOCK_TEST_BACKENDS stops the run: it would quietly test less."""
    unknown = [name for name in _GIVEN if name not in BACKENDS]
    if unknown:
        ids = {test_id: name for name, (_, test_id) in SERVERS.items() if test_id != name}
        hints = "".join(f" ({ids[name]}, not {name})" for name in unknown if name in ids)
        raise pytest.UsageError(
            f"FENCELOCK_TEST_BACKENDS={_LISTED}: {', '.join(map(repr, unknown))} "
            f"{'is not a backend' if len(unknown) == 1 else 'are not backends'}{hints}; "
            f"the backends are {', '.join(BACKENDS)}"
        )
    if REQUIRE_SERVERS:
        # Named (by the list, or as a path of Python's own) and required: not quietly left out.
        wanted = _GIVEN or [name for name in BINDING_PATHS if name in SELECTED]
        missing = [SERVERS[name][0] for name in wanted if name in SERVERS]
        missing = [variable for variable in missing if not os.environ.get(variable)]
        if missing:
            raise pytest.UsageError(
                f"FENCELOCK_REQUIRE_SERVERS=1, and {', '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not set (tests/servers.sh env prints "
                "the test servers' URLs)"
            )


def left_out(backend: str) -> Optional[str]:
    """Why a test of `backend` does not run, when FENCELOCK_TEST_BACKENDS leaves it out."""
    if backend in SELECTED:
        return None
    return (
        f"{backend} is not in FENCELOCK_TEST_BACKENDS "
        "(the soak runs the full matrix: tests/faults/run.sh soak)"
    )


def backend_params(among: Sequence[str] = BACKENDS) -> List[object]:
    """The parameters of a test run on each backend of `among` that is selected: SQLite, and each
    server backend whose FENCELOCK_TEST_*_URL is set."""
    params: List[object] = []
    for backend in among:
        if backend not in SELECTED:
            continue
        if backend == "sqlite":
            params.append(pytest.param("sqlite", id="sqlite"))
            continue
        variable, test_id = SERVERS[backend]
        if os.environ.get(variable):
            params.append(pytest.param(os.environ[variable], id=test_id))
    return params


def server_url(backend: str, variable: Optional[str] = None) -> str:
    """The URL of `backend`'s test server, for a test of that backend alone: from `variable`
    (another server of the backend, such as Redis with ACLs), by default the backend's own.

    Skips when FENCELOCK_TEST_BACKENDS leaves the backend out, even under
    FENCELOCK_REQUIRE_SERVERS=1 (the choice is deliberate), and when the variable is not set
    outside CI; fails when it is not set under FENCELOCK_REQUIRE_SERVERS=1.
    """
    variable = variable or SERVERS[backend][0]
    why = left_out(backend)
    if why is not None:
        pytest.skip(why)
    url = os.environ.get(variable)
    if not url:
        if REQUIRE_SERVERS:
            pytest.fail(f"{variable} is not set, and FENCELOCK_REQUIRE_SERVERS=1")
        pytest.skip(f"{variable} is not set (tests/servers.sh env)")
    return url


# A backend that cannot be used is tried once, not once per test.
_unusable: Dict[str, str] = {}


@pytest.fixture(params=backend_params())
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of each selected backend in turn (with its password: never show it)."""
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
