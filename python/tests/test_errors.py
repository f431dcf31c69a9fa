"""Exceptions: the hierarchy, pickling, and bad input of every kind.

Each bad input asserts the documented class and something about the message.
"""

import asyncio
import datetime
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict

import pytest
from conftest import LONG, native_test_hook, server_url, take_over

import fencelock

CODES = {
    fencelock.Timeout: "TIMEOUT",
    fencelock.Lost: "LOST",
    fencelock.NotHeld: "NOT_HELD",
    fencelock.Unavailable: "UNAVAILABLE",
    fencelock.InvalidArgument: "INVALID_ARGUMENT",
    fencelock.Auth: "AUTH",
    fencelock.StaleToken: "STALE_TOKEN",
    fencelock.BackendError: "BACKEND",
    fencelock.Deadlock: "DEADLOCK",
    fencelock.Closed: "CLOSED",
    fencelock.InternalError: "INTERNAL",
}


@pytest.mark.parametrize("cls,code", list(CODES.items()), ids=lambda x: getattr(x, "__name__", x))
def test_each_code_has_a_picklable_class(cls: "type[fencelock.LockError]", code: str) -> None:
    err = cls("something went wrong")
    assert isinstance(err, fencelock.LockError)
    assert err.code == code and cls.code == code
    assert str(err) == "something went wrong" and err.message == "something went wrong"
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and back.code == code and str(back) == "something went wrong"


def test_builtin_bases() -> None:
    assert issubclass(fencelock.Timeout, TimeoutError)
    assert issubclass(fencelock.Unavailable, ConnectionError)
    assert issubclass(fencelock.InvalidArgument, ValueError)
    assert issubclass(fencelock.Auth, PermissionError)
    base = pickle.loads(pickle.dumps(fencelock.LockError("new", "SOME_FUTURE_CODE")))
    assert base.code == "SOME_FUTURE_CODE" and str(base) == "new"


def test_raised_errors_pickle(locker: fencelock.Locker, rival: fencelock.Locker) -> None:
    held = rival.acquire("p")
    with pytest.raises(fencelock.Timeout) as caught:
        locker.acquire("p", wait=0)
    back = pickle.loads(pickle.dumps(caught.value))
    assert isinstance(back, fencelock.Timeout) and str(back) == str(caught.value)
    held.release()


def test_panic_is_internal_error_not_panic_exception() -> None:
    with pytest.raises(fencelock.InternalError, match="panic") as caught:
        native_test_hook("_test_panic")()
    assert caught.value.code == "INTERNAL"
    assert type(caught.value).__name__ == "InternalError"


# --- bad arguments to lock options: (kwargs, message fragment) ---------------------------------

BAD_LOCK_OPTIONS = {
    "ttl-str": ({"ttl": "30"}, "ttl must be a number of seconds"),
    "ttl-nan": ({"ttl": math.nan}, "finite"),
    "ttl-inf": ({"ttl": math.inf}, "finite"),
    "ttl-negative": ({"ttl": -1}, "negative"),
    "ttl-negative-float": ({"ttl": -0.5}, "negative"),
    "ttl-bool": ({"ttl": True}, "not a bool"),
    "ttl-huge-int": ({"ttl": 10**30}, "out of range"),
    "ttl-huge-float": ({"ttl": 1e300}, "out of range"),
    "ttl-zero": ({"ttl": 0}, "too short"),
    "ttl-too-short": ({"ttl": 0.05}, "too short"),
    "ttl-too-long": ({"ttl": datetime.timedelta(days=8)}, "too long"),
    "ttl-negative-timedelta": ({"ttl": datetime.timedelta(seconds=-1)}, "negative"),
    "ttl-none": ({"ttl": None}, "not None"),
    "ttl-list": ({"ttl": [30]}, "not list"),
    "wait-negative": ({"wait": -1}, "negative"),
    "wait-str": ({"wait": "5"}, "wait must be"),
    "wait-bool": ({"wait": False}, "not a bool"),
    "wait-nan": ({"wait": math.nan}, "finite"),
    "wait-inf": ({"wait": math.inf}, "finite"),
    "wait-too-long": ({"wait": 10**12}, "longer than a year"),
    "max-hold-zero": ({"max_hold": 0}, "max_hold must be positive"),
    "max-hold-negative": ({"max_hold": -3}, "negative"),
    "auto-renew-str": ({"auto_renew": "yes"}, "True or False"),
    "auto-renew-int": ({"auto_renew": 1}, "True or False"),
    "holder-int": ({"holder": 5}, "holder must be a str"),
    "holder-too-long": ({"holder": "x" * 2000}, "1024 bytes"),
    "timeout": ({"timeout": 5}, "ttl="),
    "unknown-option": ({"ttl_ms": 5}, "unknown option"),
    "reentrant-str": ({"reentrant": "yes"}, "True or False"),
    "reentrant-int": ({"reentrant": 1}, "True or False"),
    "pipelined-release-str": ({"pipelined_release": "no"}, "True or False"),
}


# The options of the wrong type, or unknown: as Python's own functions, these raise TypeError
# (and InvalidArgument too); a value of the right type out of range raises ValueError alone.
WRONG_TYPES = {
    "ttl-str",
    "ttl-bool",
    "ttl-none",
    "ttl-list",
    "wait-str",
    "wait-bool",
    "auto-renew-str",
    "auto-renew-int",
    "holder-int",
    "timeout",
    "unknown-option",
    "reentrant-str",
    "reentrant-int",
    "pipelined-release-str",
}


@pytest.mark.parametrize(
    "key,kwargs,fragment",
    [(key, *case) for key, case in BAD_LOCK_OPTIONS.items()],
    ids=BAD_LOCK_OPTIONS.keys(),
)
def test_bad_lock_options(
    locker: fencelock.Locker, key: str, kwargs: Dict[str, Any], fragment: str
) -> None:
    # Refused at once, whichever entry point; lock() refuses before anything is entered.
    for call in (locker.lock, locker.locked, locker.acquire):
        with pytest.raises(fencelock.InvalidArgument, match=fragment) as caught:
            call("opts", **kwargs)
        assert caught.value.code == "INVALID_ARGUMENT"
        assert isinstance(caught.value, ValueError)
        assert isinstance(caught.value, TypeError) == (key in WRONG_TYPES), key


def test_wrong_types_are_caught_by_except_type_error_and_except_lock_error(
    locker: fencelock.Locker,
) -> None:
    for catch in (TypeError, fencelock.LockError):
        try:
            locker.lock("x", ttl="30")  # type: ignore[arg-type]
        except catch as error:
            assert "ttl must be a number of seconds" in str(error)
        else:
            pytest.fail("ttl='30' was accepted")


def test_timeout_is_refused_everywhere_and_names_ttl_and_wait(
    locker: fencelock.Locker, url: str
) -> None:
    calls: Dict[str, Callable[[], Any]] = {
        # mypy already refuses these (the stubs have no timeout=); the runtime says why.
        "lock": lambda: locker.lock("t", timeout=5),  # type: ignore[call-arg]
        "acquire": lambda: locker.acquire("t", timeout=5),  # type: ignore[call-arg]
        "try_acquire": lambda: locker.try_acquire("t", timeout=5),  # type: ignore[call-arg]
        "acquire_async": lambda: locker.acquire_async("t", timeout=5),  # type: ignore[call-arg]
        "connect": lambda: fencelock.connect(url, timeout=5),  # type: ignore[call-arg]
    }
    for name, call in calls.items():
        with pytest.raises(fencelock.InvalidArgument) as caught:
            call()
        assert "ttl=" in str(caught.value) and "wait=" in str(caught.value), name


BAD_NAMES = {
    "int": (123, "must be a str, got int"),
    "bytes": (b"name", "must be a str, got bytes"),
    "none": (None, "must be a str, got NoneType"),
    "empty": ("", "empty"),
    "too-long": ("x" * 256, "256 bytes"),
    "too-long-utf8": ("é" * 128, "256 bytes"),
    "nul": ("a\0b", "NUL"),
    "surrogate": ("\ud800", "surrogate"),
}


@pytest.mark.parametrize("name,fragment", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_bad_lock_names(locker: fencelock.Locker, name: Any, fragment: str) -> None:
    for call in (locker.lock, locker.acquire, locker.try_acquire, locker.inspect):
        with pytest.raises(fencelock.InvalidArgument, match=fragment):
            call(name)


def test_try_acquire_takes_no_wait(locker: fencelock.Locker) -> None:
    with pytest.raises(fencelock.InvalidArgument, match="tries once"):
        locker.try_acquire("x", wait=1)  # type: ignore[call-arg]


BAD_URLS = {
    "not-str": (123, "url must be a str"),
    "not-a-url": ("locks.db", "not a URL"),
    "unknown-scheme": ("ftp://host/x", "unknown URL scheme"),
    "sqlite-no-file": ("sqlite://", "names no file"),
    "sqlite-memory": ("sqlite://:memory:", "in-memory"),
    "sqlite-unknown-option": ("sqlite:///tmp/x.db?colour=red", "unknown sqlite URL option"),
    "no-host": ("redis://user:s3cret-pw@/0", "no host"),
    "bad-port": ("redis://user:s3cret-pw@localhost:99999", "port"),
}


@pytest.mark.parametrize("url,fragment", BAD_URLS.values(), ids=BAD_URLS.keys())
def test_bad_urls(url: Any, fragment: str) -> None:
    with pytest.raises(fencelock.InvalidArgument, match=fragment) as caught:
        fencelock.connect(url)
    assert "s3cret" not in str(caught.value) and "s3cret" not in repr(caught.value)


def test_password_never_in_errors() -> None:
    # Whatever this build does with a Redis URL (not built in yet, or no server on this port),
    # the password stays out of the message.
    with pytest.raises(fencelock.LockError) as caught:
        fencelock.connect("redis://user:s3cret-pw@127.0.0.1:1/0", operation_timeout=2)
    assert "s3cret" not in str(caught.value) and "s3cret" not in repr(caught.value)


def test_the_drivers_error_is_the_cause(url: str) -> None:
    # SQLite's SQLITE_READONLY (8) under a BackendError: `raise ... from DriverError(...)`.
    with fencelock.connect(url) as locker:
        locker.try_acquire("made")
    with pytest.raises(fencelock.BackendError, match="read-only") as caught:
        with fencelock.connect(f"{url}?mode=ro") as read_only:
            read_only.try_acquire("job")
    cause = caught.value.__cause__
    assert isinstance(cause, fencelock.DriverError) and not isinstance(cause, fencelock.LockError)
    assert (cause.driver, cause.code) == ("sqlite", "8")
    assert cause.message and str(cause) == f"sqlite error 8: {cause.message}"
    copy = pickle.loads(pickle.dumps(cause))
    assert (copy.driver, copy.code, copy.message) == ("sqlite", "8", cause.message)
    # A fencelock error made without a driver has no cause.
    with pytest.raises(fencelock.InvalidArgument) as refused:
        fencelock.connect(url, poll_interval=0)
    assert refused.value.__cause__ is None


def test_a_refused_password_keeps_the_servers_code_as_the_cause() -> None:
    # tests/servers.sh's Redis with ACLs: required where FENCELOCK_REQUIRE_SERVERS=1 (CI).
    acl_url = server_url("redis", "FENCELOCK_TEST_REDIS_ACL_URL")
    url = acl_url.replace(":fencelock-test@", ":hunter2-no@")
    with pytest.raises(fencelock.Auth) as caught:
        fencelock.connect(url)
    cause = caught.value.__cause__
    assert isinstance(cause, fencelock.DriverError)
    assert (cause.driver, cause.code) == ("redis", "WRONGPASS")
    assert "hunter2" not in f"{cause} {cause!r}"


def test_sqlite_folder_missing(tmp_path: Path) -> None:
    with pytest.raises(fencelock.InvalidArgument, match="does not exist"):
        fencelock.connect(f"sqlite://{tmp_path}/missing/folder/locks.db")


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        ({"poll_interval": 0}, "poll_interval"),
        ({"operation_timeout": "10"}, "operation_timeout must be"),
        ({"colour": 1}, "unknown option"),
    ],
)
def test_bad_locker_options(url: str, kwargs: Dict[str, Any], fragment: str) -> None:
    with pytest.raises(fencelock.InvalidArgument, match=fragment):
        fencelock.connect(url, **kwargs)


def test_use_after_release(locker: fencelock.Locker) -> None:
    lease = locker.acquire("released")
    lease.release()
    with pytest.raises(fencelock.NotHeld, match="already released"):
        lease.release()
    with pytest.raises(fencelock.NotHeld, match="already released"):
        lease.extend(10)
    with pytest.raises(fencelock.NotHeld):
        lease.raise_if_lost()
    assert not lease.is_lost


def test_use_after_loss(locker: fencelock.Locker, db_path: Path) -> None:
    lease = locker.acquire("lost", ttl=0.6)
    take_over(db_path, "lost")
    assert lease.lost.wait(LONG)
    for call in (lease.raise_if_lost, lease.extend, lease.release):
        with pytest.raises(fencelock.Lost, match="lost"):
            call()


def test_bad_extend_ttl(locker: fencelock.Locker) -> None:
    with locker.lock("ext") as lease:
        with pytest.raises(fencelock.InvalidArgument, match="finite"):
            lease.extend(math.nan)
        with pytest.raises(fencelock.InvalidArgument, match="too short"):
            lease.extend(0.01)
        with pytest.raises(fencelock.InvalidArgument, match="not a bool"):
            lease.extend(True)


def test_bad_wait_timeout_on_signal(locker: fencelock.Locker) -> None:
    with locker.lock("sig") as lease:
        with pytest.raises(fencelock.InvalidArgument, match="timeout must be"):
            lease.lost.wait("1")  # type: ignore[arg-type]
        with pytest.raises(fencelock.InvalidArgument, match="negative"):
            lease.lost.wait(-1)


def test_closed_locker(url: str) -> None:
    locker = fencelock.connect(url)
    locker.close()
    with pytest.raises(fencelock.Closed, match="closed"):
        locker.acquire("x")
    with pytest.raises(fencelock.Closed):
        locker.try_acquire("x")
    with pytest.raises(fencelock.Closed):
        locker.inspect("x")
    with pytest.raises(fencelock.Closed):
        with locker.lock("x"):
            pass

    async def main() -> None:
        with pytest.raises(fencelock.Closed):
            await locker.acquire_async("x")

    asyncio.run(main())


def test_async_call_without_a_running_loop(locker: fencelock.Locker) -> None:
    with pytest.raises(RuntimeError):
        locker.acquire_async("x")


def test_positional_options_are_refused(locker: fencelock.Locker) -> None:
    with pytest.raises(TypeError):
        locker.acquire("x", 30)  # type: ignore[misc]


_RUNTIME_PROBE = """
import sys
import fencelock
try:
    with fencelock.connect(sys.argv[1]) as locker:
        with locker.lock("runtime-threads", wait=5) as lease:
            print("TOKEN", lease.token)
except fencelock.InvalidArgument as e:
    print("INVALID_ARGUMENT", e)
"""


@pytest.mark.parametrize(
    "value,ok", [("0", False), ("lots", False), ("65", False), ("3", True), ("", True)]
)
def test_runtime_thread_count_from_the_environment(tmp_path: Path, value: str, ok: bool) -> None:
    """FENCELOCK_RUNTIME_THREADS is read when the runtime starts: in a fresh process."""
    env = {**os.environ, "FENCELOCK_RUNTIME_THREADS": value}
    url = f"sqlite://{tmp_path}/threads.db"
    done = subprocess.run(
        [sys.executable, "-c", _RUNTIME_PROBE, url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    if ok:
        assert done.stdout.startswith("TOKEN "), done.stdout
        assert int(done.stdout.split()[1]) > 0
    else:
        assert done.stdout.startswith("INVALID_ARGUMENT"), done.stdout
        assert "FENCELOCK_RUNTIME_THREADS" in done.stdout and repr(value) in done.stdout.replace(
            '"', "'"
        )


# --- every duration and timeout, with values a panic would hide behind ---------------------------

ODD_SECONDS = [math.nan, math.inf, -math.inf, -1, -1e-9, 1e19, 2**63 - 1, 2**64, 10**30]


@pytest.mark.parametrize("seconds", ODD_SECONDS, ids=[repr(s) for s in ODD_SECONDS])
def test_no_duration_or_timeout_reaches_a_panic(url: str, seconds: Any) -> None:
    """Each call either works (at once: the objects are in a state that answers at once) or
    raises InvalidArgument; never InternalError, never pyo3's PanicException."""
    locker = fencelock.connect(url)
    lease = locker.acquire("odd-durations", ttl=5)
    events = locker.events()
    events.close()
    logs = fencelock._native._LogSubscription(30)
    calls: Dict[str, Any] = {
        "lock ttl": lambda: locker.acquire("odd-ttl", ttl=seconds),
        "lock wait": lambda: locker.acquire("odd-wait", wait=seconds),
        "lock max_hold": lambda: locker.acquire("odd-max-hold", max_hold=seconds),
        "extend": lambda: lease.extend(seconds),
        "events.next on an ended subscription": lambda: events.next(timeout=seconds),
        # Its timeout is clamped to [0, 3600] s: only the values that answer at once.
        "log subscription next": lambda: logs.next(math.nan if seconds > 0 else seconds),
        "connect operation_timeout": lambda: fencelock.connect(url, operation_timeout=seconds),
        "connect poll_interval": lambda: fencelock.connect(url, poll_interval=seconds),
    }
    try:
        for what, call in calls.items():
            try:
                result = call()
            except fencelock.InvalidArgument:
                continue
            except BaseException as e:  # noqa: BLE001 - the point: nothing else may escape
                pytest.fail(f"{what}({seconds!r}) raised {type(e).__name__}: {e}")
            if isinstance(result, fencelock.Locker):
                result.close()
            elif isinstance(result, fencelock.Lease):
                result.release()
    finally:
        logs.close()
        lease.release()
        locker.close()
