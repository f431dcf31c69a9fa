"""The same few checks on every backend this machine offers: the binding knows no backend.

SQLite always runs. A server backend runs when its `FENCELOCK_TEST_*_URL` variable is set (as
`tests/servers.sh env` prints) and, outside CI (FENCELOCK_REQUIRE_SERVERS=1), is skipped when its
server does not answer. The core's own suites test each backend in depth.
"""

import asyncio
import os
import uuid
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

import fencelock
from conftest import LONG, in_another_thread

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
def any_locker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[fencelock.Locker]:
    url = request.param if request.param != "sqlite" else f"sqlite://{tmp_path / 'locks.db'}"
    if url in _unusable:
        pytest.skip(_unusable[url])
    try:
        locker = fencelock.connect(url, operation_timeout=10)
    except fencelock.Unavailable as e:
        if REQUIRE_SERVERS:
            raise
        _unusable[url] = f"server not answering: {e}"
        pytest.skip(_unusable[url])
    yield locker
    locker.close()


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


def test_tokens_increase(any_locker: fencelock.Locker) -> None:
    name = fresh("tokens")
    tokens = []
    for _ in range(3):
        lease = any_locker.acquire(name, ttl=10)
        tokens.append(lease.token)
        lease.release()
    assert all(a < b for a, b in zip(tokens, tokens[1:]))


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
