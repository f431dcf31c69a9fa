"""Re-entrant locks per execution scope (issue 11): the thread, or the asyncio task, that holds a
lock re-enters it with ``reentrant=True``; other threads and tasks sharing the Locker contend.
The count is kept in the core over one lease, so the server sees one acquisition."""

import asyncio
import threading
from typing import List, Optional

import pytest
from conftest import LONG
from test_backends import fresh

import fencelock


def test_nested_with_blocks_share_one_lease_on_every_backend(any_locker: fencelock.Locker) -> None:
    name = fresh("reenter")
    lock = any_locker.lock(name, ttl=10, reentrant=True)
    with lock as outer:
        with lock as inner:
            assert inner.token == outer.token
            # A different lock() object for the same name, in the same thread, re-enters too.
            with any_locker.lock(name, reentrant=True, wait=0) as third:
                assert third.token == outer.token
        assert outer.is_held and not inner.is_held
        info = any_locker.inspect(name)
        assert info.held and info.token == outer.token  # the inner exit kept the lock
    assert not any_locker.inspect(name).held


def test_other_threads_contend_while_one_holds_reentrantly(locker: fencelock.Locker) -> None:
    seen: List[Optional[fencelock.Lease]] = []

    def other_thread() -> None:
        seen.append(locker.try_acquire("per-thread", reentrant=True))

    with locker.lock("per-thread", reentrant=True) as outer:
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join(LONG)
        assert seen == [None], "another thread must not re-enter this thread's lock"
        assert outer.is_held


def test_acquire_and_release_in_any_order(locker: fencelock.Locker, url: str) -> None:
    first = locker.acquire("order", reentrant=True)
    second = locker.acquire("order", reentrant=True, wait=0)
    assert second.token == first.token
    first.release()
    with fencelock.connect(url) as rival:
        assert rival.try_acquire("order") is None
        second.release()
        lease = rival.acquire("order", wait=LONG)
        assert lease.token > first.token
        lease.release()
    with pytest.raises(fencelock.NotHeld):
        first.release()


def test_a_loss_while_nested_makes_every_lease_lost(locker: fencelock.Locker) -> None:
    outer = locker.acquire("lost-nested", ttl=0.5, auto_renew=False, reentrant=True)
    inner = locker.acquire("lost-nested", reentrant=True, wait=0)
    assert outer.lost.wait(LONG)
    assert inner.lost.is_set() and inner.is_lost
    with pytest.raises(fencelock.Lost):
        inner.release()
    with pytest.raises(fencelock.Lost):
        outer.raise_if_lost()


def test_without_the_option_nesting_raises_deadlock_naming_the_lock(
    locker: fencelock.Locker,
) -> None:
    with locker.lock("plain"):
        with pytest.raises(fencelock.Deadlock, match='"plain"'):
            locker.acquire("plain")
        with pytest.raises(fencelock.Deadlock):
            locker.try_acquire("plain")


def test_tasks_re_enter_their_own_lock_and_contend_for_others(locker: fencelock.Locker) -> None:
    async def main() -> None:
        lock = locker.lock("per-task", ttl=10, reentrant=True)
        async with lock as outer:
            async with lock as inner:
                assert inner.token == outer.token

            # A task created inside the block is another scope: it contends.
            async def from_a_child_task() -> Optional[fencelock.Lease]:
                return await locker.try_acquire_async("per-task", reentrant=True)

            assert await asyncio.create_task(from_a_child_task()) is None
            nested = await locker.acquire_async("per-task", reentrant=True, wait=0)
            assert nested.token == outer.token
            await nested.release_async()
            assert outer.is_held

        # Many tasks on one thread: each waits its turn; none re-enters another's lease.
        holders: List[int] = []
        inside = 0

        async def worker(i: int) -> None:
            nonlocal inside
            async with locker.lock("per-task", reentrant=True, wait=LONG):
                inside += 1
                assert inside == 1
                holders.append(i)
                await asyncio.sleep(0.005)
                inside -= 1

        await asyncio.gather(*(worker(i) for i in range(10)))
        assert sorted(holders) == list(range(10))

    asyncio.run(main())
