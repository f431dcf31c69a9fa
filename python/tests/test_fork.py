"""After os.fork(): inherited objects are inert in the child, and the child can connect anew."""

import asyncio
import json
import os

import pytest
from conftest import LONG

import fencelock

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def child_checks(locker: fencelock.Locker, lease: fencelock.Lease, url: str) -> dict:
    out: dict = {}

    def code_of(call) -> str:  # type: ignore[no-untyped-def]
        try:
            call()
            return "ok"
        except fencelock.LockError as e:
            return e.code

    out["release"] = code_of(lease.release)
    out["extend"] = code_of(lease.extend)
    out["raise_if_lost"] = code_of(lease.raise_if_lost)
    out["is_held"] = lease.is_held
    out["acquire_with_parents_locker"] = code_of(lambda: locker.acquire("other", wait=0))
    out["parents_locker_closed"] = locker.closed
    locker.close()  # must not release the parent's locks
    with fencelock.connect(url) as mine:
        out["held_by_parent"] = mine.try_acquire("forked") is None
        own = mine.acquire("child-own", ttl=5, wait=LONG)
        out["own_token"] = own.token
        own.release()

    async def in_asyncio() -> int:
        loc = await fencelock.connect_async(url)
        got = await loc.acquire_async("child-async", wait=LONG)
        await got.release_async()
        await loc.close_async()
        return got.token

    out["async_token"] = asyncio.run(in_asyncio())
    return out


def test_fork_child_is_inert_and_can_reconnect(locker: fencelock.Locker, url: str) -> None:
    lease = locker.acquire("forked", ttl=3)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            os.close(read_end)
            result = child_checks(locker, lease, url)
        except BaseException as e:  # noqa: BLE001 - sent to the parent
            result = {"error": repr(e)}
            code = 1
        os.write(write_end, json.dumps(result).encode())
        os.close(write_end)
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        report = json.loads(pipe.read().decode() or "{}")
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, report
    assert report["release"] == "CLOSED"
    assert report["extend"] == "CLOSED"
    assert report["raise_if_lost"] == "CLOSED"
    assert report["is_held"] is False
    assert report["acquire_with_parents_locker"] == "CLOSED"
    assert report["parents_locker_closed"] is True
    assert report["held_by_parent"] is True
    assert report["own_token"] > 0 and report["async_token"] > 0
    # The parent's lease outlived the child's exit, and still renews (ttl 3 s, renewed every
    # second): it is held well past its first expiry.
    assert lease.is_held
    assert not lease.lost.wait(4)
    lease.extend()
    lease.release()
