"""Locks as decorators, and blocking calls refused inside a running asyncio loop."""

import asyncio
import os
import subprocess
import sys
import threading
from typing import Any, List

import pytest
from conftest import LONG

import fencelock


def test_a_decorated_function_runs_each_call_holding_the_lock(
    locker: fencelock.Locker, rival: fencelock.Locker
) -> None:
    seen: List[Any] = []

    @locker.locked("nightly", ttl=10, wait=LONG)
    def nightly(day: int) -> str:
        lease = fencelock.current_lease()
        seen.append((lease.token, rival.inspect("nightly").held))
        assert rival.try_acquire("nightly") is None
        return f"day {day}"

    assert nightly.__name__ == "nightly"
    assert nightly(1) == "day 1" and nightly(2) == "day 2"
    assert [held for _, held in seen] == [True, True]
    assert seen[0][0] < seen[1][0], "each call takes the lock anew"
    assert not rival.inspect("nightly").held, "released after each call"
    with pytest.raises(LookupError):
        fencelock.current_lease()


def test_the_lock_is_released_when_the_call_raises(
    locker: fencelock.Locker, rival: fencelock.Locker
) -> None:
    @locker.lock("failing", ttl=10)
    def failing() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        failing()
    assert not rival.inspect("failing").held


def test_calls_from_two_threads_take_turns(locker: fencelock.Locker) -> None:
    inside = 0
    overlaps = 0

    @locker.locked("turns", ttl=10, wait=LONG)
    def section() -> None:
        nonlocal inside, overlaps
        inside += 1
        overlaps += inside > 1
        threading.Event().wait(0.01)
        inside -= 1

    threads = [threading.Thread(target=lambda: [section() for _ in range(5)]) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LONG)
    assert overlaps == 0 and inside == 0


def test_a_coroutine_function_holds_the_lock_with_async_with(url: str) -> None:
    async def main() -> None:
        locker = await fencelock.connect_async(url)
        rival = await fencelock.connect_async(url)
        order: List[str] = []

        @locker.locked("report", ttl=10, wait=LONG)
        async def report(who: str) -> int:
            lease = fencelock.current_lease()
            order.append(f"{who} in")
            assert (await rival.inspect_async("report")).held
            await asyncio.sleep(0.01)
            assert fencelock.current_lease() is lease, "each task sees its own call's lease"
            order.append(f"{who} out")
            return int(lease.token)

        assert asyncio.iscoroutinefunction(report)
        tokens = await asyncio.gather(report("a"), report("b"))
        assert tokens[0] != tokens[1]
        assert order in (["a in", "a out", "b in", "b out"], ["b in", "b out", "a in", "a out"])
        assert not (await rival.inspect_async("report")).held
        await locker.close_async()
        await rival.close_async()

    asyncio.run(main())


def test_a_semaphore_decorates_too(locker: fencelock.Locker) -> None:
    @locker.semaphore("pool", 2, ttl=10)
    def work() -> str:
        return str(fencelock.current_lease().mode)

    assert work() == "permit"


def test_generators_and_non_callables_are_refused(locker: fencelock.Locker) -> None:
    def numbers() -> Any:
        yield 1

    with pytest.raises(TypeError, match="generator") as caught:
        locker.locked("gen")(numbers)
    assert isinstance(caught.value, fencelock.InvalidArgument)
    with pytest.raises(TypeError, match="not int"):
        locker.locked("gen")(5)  # type: ignore[type-var]


def test_a_blocking_call_inside_a_running_loop_is_refused_and_names_the_async_form(
    url: str,
) -> None:
    locker = fencelock.connect(url)

    async def main() -> None:
        with pytest.raises(fencelock.BlockingCallInEventLoop, match="async with") as caught:
            with locker.lock("in-loop", ttl=10):
                pass
        assert isinstance(caught.value, RuntimeError)
        assert not isinstance(caught.value, fencelock.LockError)
        with pytest.raises(fencelock.BlockingCallInEventLoop, match="acquire_async"):
            locker.acquire("in-loop")
        # A call of one round trip is let through, as a synchronous driver's would be.
        quick = locker.try_acquire("in-loop", ttl=10)
        assert quick is not None
        quick.release()
        # The async form works in the same loop, and the blocking one in a worker thread.
        async with locker.lock("in-loop", ttl=10) as lease:
            assert lease.token > 0
        await asyncio.to_thread(lambda: locker.acquire("in-loop", ttl=10).release())

    asyncio.run(main())
    locker.close()


def test_the_environment_allows_blocking_calls_inside_a_loop_for_jupyter(url: str) -> None:
    script = f"""
import asyncio, fencelock
locker = fencelock.connect({url!r})
async def main():
    with locker.lock("in-loop", ttl=10) as lease:
        print("held", lease.token > 0)
asyncio.run(main())
"""
    env = dict(os.environ, FENCELOCK_ALLOW_BLOCKING_IN_EVENT_LOOP="1")
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=LONG * 2
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "held True"
