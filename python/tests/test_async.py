"""The asyncio face: nothing blocks the event loop; cancellation leaves nothing behind."""

import asyncio
from typing import List

import pytest
from conftest import LONG, native_test_hook

import fencelock


def test_fifty_tasks_contend(url: str) -> None:
    async def main() -> None:
        locker = await fencelock.connect_async(url)
        inside: List[int] = []
        overlaps = 0
        tokens: List[int] = []
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        async def worker() -> None:
            nonlocal overlaps
            async with locker.lock("hot", ttl=10, wait=LONG * 4) as lease:
                if inside:
                    overlaps += 1
                inside.append(1)
                tokens.append(lease.token)
                await asyncio.sleep(0.001)
                inside.pop()

        tick = asyncio.ensure_future(ticker())
        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(50))), LONG * 8)
        done.set()
        await tick
        await locker.close_async()
        assert overlaps == 0
        assert len(tokens) == 50 and tokens == sorted(tokens) and len(set(tokens)) == 50
        assert ticks > 0  # the loop kept running while tasks waited

    asyncio.run(main())


def test_waiting_does_not_block_the_loop(locker: fencelock.Locker, rival: fencelock.Locker) -> None:
    async def main() -> None:
        held = await rival.acquire_async("loop", ttl=10)
        loop = asyncio.get_running_loop()
        # Only a running loop can call this; if waiting blocked the loop, acquire would never end.
        loop.call_later(0.3, lambda: asyncio.ensure_future(held.release_async()))
        lease = await asyncio.wait_for(locker.acquire_async("loop", ttl=10), LONG)
        assert lease.token > held.token
        await lease.release_async()

    asyncio.run(main())


def test_async_timeouts_and_try(locker: fencelock.Locker, rival: fencelock.Locker) -> None:
    async def main() -> None:
        held = await rival.acquire_async("busy", ttl=10)
        with pytest.raises(fencelock.Timeout):
            await locker.acquire_async("busy", wait=0.2)
        assert await locker.try_acquire_async("busy") is None
        with pytest.raises(fencelock.Timeout):
            async with locker.lock("busy", wait=0):
                pass
        await held.release_async()
        lease = await locker.try_acquire_async("busy")
        assert lease is not None
        info = await locker.inspect_async("busy")
        assert info.held and info.token == lease.token
        await lease.extend_async(5)
        async with lease:
            pass
        assert not lease.is_held

    asyncio.run(main())


def test_cancelled_acquire_leaves_nothing_behind(
    locker: fencelock.Locker, rival: fencelock.Locker, url: str
) -> None:
    async def main() -> None:
        held = await rival.acquire_async("cancel", ttl=10)
        waiting = asyncio.ensure_future(locker.acquire_async("cancel", ttl=10))
        await asyncio.sleep(0.3)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await held.release_async()
        with fencelock.connect(url) as other:
            lease = other.try_acquire("cancel")
            assert lease is not None
            lease.release()

    asyncio.run(main())


def test_same_task_entering_twice_is_a_deadlock(locker: fencelock.Locker) -> None:
    async def main() -> None:
        lock = locker.lock("task-nested", ttl=5)
        async with lock:
            with pytest.raises(fencelock.Deadlock):
                async with lock:
                    pass

        # Other tasks sharing the object wait their turn instead.
        order: List[int] = []

        async def use(i: int) -> None:
            async with lock:
                order.append(i)
                await asyncio.sleep(0.01)

        await asyncio.wait_for(asyncio.gather(*(use(i) for i in range(4))), LONG)
        assert sorted(order) == [0, 1, 2, 3]

    asyncio.run(main())


def test_async_with_locker(url: str) -> None:
    async def main() -> None:
        async with await fencelock.connect_async(url) as locker:
            lease = await locker.acquire_async("ctx")
        assert locker.closed and not lease.is_held

    asyncio.run(main())


def test_panic_in_an_awaitable_is_internal_error() -> None:
    async def main() -> None:
        with pytest.raises(fencelock.InternalError, match="panic"):
            await native_test_hook("_test_panic_async")()

    asyncio.run(main())
