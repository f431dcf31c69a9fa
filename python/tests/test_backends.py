"""The same few checks on every backend this machine offers: the binding knows no backend.

SQLite, and each server backend whose `FENCELOCK_TEST_*_URL` variable is set (as
`tests/servers.sh env` prints), of those FENCELOCK_TEST_BACKENDS selects (conftest.py); outside
CI (FENCELOCK_REQUIRE_SERVERS=1) a server that does not answer is skipped. The core's own suites
test each backend in depth, the lock contract in its conformance suite.
"""

import asyncio
import datetime
import uuid
from typing import List

import pytest
from conftest import LONG, in_another_thread

import fencelock


def fresh(prefix: str) -> str:
    # Server backends keep state between runs: every test uses names of its own.
    return f"py-{prefix}-{uuid.uuid4().hex[:12]}"


def test_acquire_release_inspect(any_locker: fencelock.Locker) -> None:
    name = fresh("basic")
    with any_locker.lock(name, ttl=10) as lease:
        assert lease.name == name and isinstance(lease.token, int) and 0 < lease.token < 2**63
        info = any_locker.inspect(name)
        assert info.held and info.token == lease.token
        # Another thread is another scope: it contends (this thread would get Deadlock).
        assert in_another_thread(lambda: any_locker.try_acquire(name)) is None
        with pytest.raises(fencelock.Timeout):
            in_another_thread(lambda: any_locker.acquire(name, wait=0.2))
    assert not any_locker.inspect(name).held


def test_valid_until_is_the_client_deadline(any_locker: fencelock.Locker) -> None:
    name = fresh("valid-until")
    lease = any_locker.acquire(name, ttl=10)
    now = datetime.datetime.now(datetime.timezone.utc)
    until = lease.valid_until
    assert until.utcoffset() == datetime.timedelta(0)
    # Within the ttl (ZooKeeper: the session timeout, 10 s or less), seconds of slack for a
    # slow machine; before the server's own expiry where there is one.
    assert now + datetime.timedelta(seconds=3) < until <= now + datetime.timedelta(seconds=10)
    if lease.expires_at is not None:
        assert until <= lease.expires_at
    lease.release()
    assert lease.valid_until <= until + datetime.timedelta(seconds=1)


def test_async_contention(any_locker: fencelock.Locker) -> None:
    name = fresh("async")

    async def main() -> List[int]:
        tokens: List[int] = []
        inside: List[int] = []

        async def worker() -> None:
            async with any_locker.lock(name, ttl=10, wait=LONG) as lease:
                assert not inside
                inside.append(1)
                tokens.append(lease.token)
                await asyncio.sleep(0.001)
                inside.pop()

        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(10))), LONG * 2)
        return tokens

    tokens = asyncio.run(main())
    assert len(tokens) == 10 and tokens == sorted(tokens)
