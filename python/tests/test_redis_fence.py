"""The Redis fence from Python: `fenced_set` checks the token and writes in one script."""

import asyncio
import uuid

import pytest
from conftest import server_url

import fencelock


@pytest.fixture
def redis_url() -> str:
    return server_url("redis")


def fresh(prefix: str) -> str:
    return f"py-{prefix}-{uuid.uuid4().hex[:12]}"


def test_fenced_set_accepts_newer_tokens_and_refuses_stale_ones(redis_url: str) -> None:
    with fencelock.connect(redis_url) as locker:
        name = fresh("fenced")
        fence = fencelock.Fence.open(redis_url, fresh("resource"))
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


def test_fenced_set_bad_inputs(redis_url: str) -> None:
    fence = fencelock.Fence.open(redis_url, fresh("resource"))
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
