"""The asyncio face: nothing blocks the event loop; cancellation leaves nothing behind."""

import asyncio
import contextlib
import threading
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Callable, List

import pytest
from conftest import BINDING_PATHS, LONG, backend_params, native_test_hook

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


async def _inspect_until(
    observer: fencelock.Locker, name: str, shows: Callable[[fencelock.LockInfo], bool]
) -> None:
    deadline = time.monotonic() + LONG
    while not shows(await observer.inspect_async(name)):
        assert time.monotonic() < deadline, f"{name}: not seen in time"
        await asyncio.sleep(0.02)


def test_cancelled_acquire_leaves_nothing_behind(
    locker: fencelock.Locker, rival: fencelock.Locker, url: str
) -> None:
    # A write lock, whose waiter is registered where inspect() shows it (a mutex's waiter is
    # not, except on ZooKeeper): the task is cancelled while it waits, and its waiter is seen to
    # go.
    async def enter() -> None:
        async with locker.write_lock("cancel", ttl=10):
            pytest.fail("entered a held lock")

    async def main() -> None:
        async with rival.write_lock("cancel", ttl=10):
            waiting = asyncio.ensure_future(enter())
            await _inspect_until(rival, "cancel", lambda info: info.waiters != [])
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await _inspect_until(rival, "cancel", lambda info: info.waiters == [])

    asyncio.run(main())
    with fencelock.connect(url) as other:
        with other.write_lock("cancel", wait=0) as lease:
            assert lease.is_held


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


@pytest.fixture(params=backend_params(BINDING_PATHS))
def path_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """SQLite, and the backends where the binding takes a path of its own: Redis (caller-driven
    I/O) and ZooKeeper (its queue and session), of those FENCELOCK_TEST_BACKENDS selects."""
    url: str = request.param
    return url if url != "sqlite" else f"sqlite://{tmp_path / 'locks.db'}"


def _free_within(other: fencelock.Locker, name: str, seconds: float) -> bool:
    """Whether `other` gets `name` within `seconds` (and gives it back)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lease = other.try_acquire(name)
        if lease is not None:
            lease.release()
            return True
        time.sleep(0.05)
    return False


async def _cancelled_before_delivery(lock: Any) -> None:
    """Enters `lock` in a task that is cancelled once its acquire completed, before the event loop
    handed the task the result."""

    async def enter() -> None:
        async with lock:
            await asyncio.sleep(LONG)

    loop = asyncio.get_running_loop()
    # fencelock hands an answer to the loop with call_soon_threadsafe (python/src/awaitable.rs):
    # seeing that call is seeing the acquire complete with its result waiting for the loop.
    handed_over = threading.Event()
    call_soon_threadsafe = loop.call_soon_threadsafe

    def watched(*args: Any, **kwargs: Any) -> asyncio.Handle:
        handle = call_soon_threadsafe(*args, **kwargs)
        handed_over.set()
        return handle

    loop.call_soon_threadsafe = watched  # type: ignore[method-assign,assignment]
    try:
        task = asyncio.ensure_future(enter())
        await asyncio.sleep(0)  # the task sends its acquire and waits for the answer
        # The loop stalls until the answer is handed over; the task is cancelled before the loop
        # runs it.
        assert handed_over.wait(LONG), "the acquire never completed"
    finally:
        del loop.call_soon_threadsafe
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_task_cancelled_before_it_received_its_lease_leaves_the_lock_free(
    path_url: str,
) -> None:
    """A task cancelled after its `async with` acquire completed but before asyncio handed it the
    result: the lease nobody can receive any more is released. It used to stay in the Lock's
    table, held and renewed for as long as the Lock lived (a decorator's: the whole process)."""
    base = f"undelivered-{uuid.uuid4().hex}"
    with fencelock.connect(path_url) as locker, fencelock.connect(path_url) as other:
        # The objects outlive the cancelled block, as a decorator's Lock does.
        shapes = {
            "lock": (locker.lock(f"{base}-a", ttl=5), [f"{base}-a"]),
            "lock_many": (
                locker.lock_many([f"{base}-b", f"{base}-c"], ttl=5),
                [f"{base}-b", f"{base}-c"],
            ),
            "leadership": (locker.leadership(f"{base}-d", ttl=5), [f"{base}-d"]),
        }
        for shape, (lock, names) in shapes.items():
            asyncio.run(_cancelled_before_delivery(lock))
            for name in names:
                assert _free_within(other, name, LONG), f"{shape}: {name} stayed held"


def test_a_block_left_in_another_task_releases_its_lease(path_url: str) -> None:
    """An `async with` entered in one task and left in another (an async generator whose steps run
    in separate tasks, as a test framework's fixture is driven) releases the block's lease; it used
    to release nothing and say nothing. Which block to leave is ambiguous when several tasks hold
    blocks of one object: RuntimeError then, never silence."""
    name = f"other-task-{uuid.uuid4().hex}"
    with fencelock.connect(path_url) as locker, fencelock.connect(path_url) as other:
        lock = locker.lock(name, ttl=5)

        @contextlib.asynccontextmanager
        async def held() -> AsyncIterator[None]:
            async with lock:
                yield

        loop = asyncio.new_event_loop()
        try:
            block = held()
            loop.run_until_complete(block.__aenter__())  # a task of its own
            assert other.try_acquire(name) is None
            loop.run_until_complete(block.__aexit__(None, None, None))  # another task
            assert _free_within(other, name, LONG), "the block's lease was not released"

            permits = locker.semaphore(f"{name}-sem", 2, ttl=5)

            async def enter() -> None:
                await permits.__aenter__()

            loop.run_until_complete(enter())
            loop.run_until_complete(enter())

            async def leave() -> None:
                await permits.__aexit__(None, None, None)

            with pytest.raises(RuntimeError, match="several of its blocks are open"):
                loop.run_until_complete(leave())
        finally:
            loop.close()
