"""The Redis fence from Python: `fenced_set` checks the token and writes in one script."""

import asyncio
import os
import uuid

import pytest

import fencelock

REDIS_URL = os.environ.get("FENCELOCK_TEST_REDIS_URL")
assert REDIS_URL or os.environ.get("FENCELOCK_REQUIRE_SERVERS") != "1", (
    "CI must set FENCELOCK_TEST_REDIS_URL"
)
pytestmark = pytest.mark.skipif(
    not REDIS_URL, reason="FENCELOCK_TEST_REDIS_URL is not set (tests/servers.sh env)"
)


def fresh(prefix: str) -> str:
    return f"py-{prefix}-{uuid.uuid4().hex[:12]}"


def test_fenced_set_accepts_newer_tokens_and_refuses_stale_ones() -> None:
    assert REDIS_URL
    with fencelock.connect(REDIS_URL) as locker:
        name = fresh("fenced")
        fence = fencelock.Fence.open(REDIS_URL, fresh("resource"))
        key = f"fencelock-test:{fresh('key')}"
        with locker.lock(name, ttl=10) as old:
            fence.fenced_set(old, key, b"old")
            old_token = old.token
        with locker.lock(name, ttl=10) as new:
            fence.fenced_set(new, key, "new")
            with pytest.raises(fencelock.StaleToken):
                fence.fenced_set(old_token, key, b"stale")
            assert fence.highest() == new.token

            async def write_again() -> None:
                await fence.fenced_set_async(new, key, b"again")

            asyncio.run(write_again())


def test_fenced_set_bad_inputs() -> None:
    assert REDIS_URL
    fence = fencelock.Fence.open(REDIS_URL, fresh("resource"))
    with pytest.raises(fencelock.InvalidArgument, match="key must be a str"):
        fence.fenced_set(1, b"bytes-key", b"v")  # type: ignore[arg-type]
    with pytest.raises(fencelock.InvalidArgument, match="value must be bytes or str"):
        fence.fenced_set(1, "k", 5)  # type: ignore[arg-type]
    with pytest.raises(fencelock.InvalidArgument, match="fenced_execute"):
        fence.fenced_execute(1, [("SELECT 1", [])])


def test_a_sql_fence_refuses_fenced_set(tmp_path: object) -> None:
    fence = fencelock.Fence.open(f"sqlite://{tmp_path}/f.db", "resource")
    with pytest.raises(fencelock.InvalidArgument, match="Redis"):
        fence.fenced_set(1, "k", b"v")
