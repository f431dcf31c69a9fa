"""The lost signal, made to fire on purpose by taking the lock's row over by hand."""

import asyncio
import threading
from pathlib import Path

import pytest
from conftest import LONG, take_over

import fencelock

# A short ttl, so renewals (every ttl/3) notice the takeover quickly.
TTL = 0.6


def test_lost_signal_fires_sync(locker: fencelock.Locker, db_path: Path) -> None:
    lease = locker.acquire("victim", ttl=TTL)
    assert not lease.lost.is_set() and lease.lost.reason is None
    assert not lease.lost.wait(0.05)
    take_over(db_path, "victim")
    assert lease.lost.wait(timeout=LONG)
    assert lease.lost.is_set() and lease.is_lost and not lease.is_held
    # A renewal that finds the row is not ours says so; the deadline could win on a stalled
    # machine, and that is a loss too.
    assert lease.lost.reason in ("taken_over", "expired")
    with pytest.raises(fencelock.Lost, match="victim"):
        lease.raise_if_lost()
    with pytest.raises(fencelock.Lost):
        lease.extend()
    with pytest.raises(fencelock.Lost):
        lease.release()


def test_waiting_on_the_signal_from_another_thread(locker: fencelock.Locker, db_path: Path) -> None:
    lease = locker.acquire("watched", ttl=TTL)
    seen = []
    watcher = threading.Thread(target=lambda: seen.append(lease.lost.wait(LONG)))
    watcher.start()
    take_over(db_path, "watched")
    watcher.join(LONG + 5)
    assert seen == [True]


def test_leaving_with_after_loss_raises_lost(locker: fencelock.Locker, db_path: Path) -> None:
    with pytest.raises(fencelock.Lost):
        with locker.lock("scope", ttl=TTL) as lease:
            take_over(db_path, "scope")
            assert lease.lost.wait(LONG)
    # ... unless another exception is already on its way out.
    with pytest.raises(KeyError):
        with locker.lock("scope2", ttl=TTL) as lease:
            take_over(db_path, "scope2")
            assert lease.lost.wait(LONG)
            raise KeyError("the block's own error")


def test_lost_signal_fires_async(url: str, db_path: Path) -> None:
    async def main() -> None:
        locker = await fencelock.connect_async(url)
        try:
            lease = await locker.acquire_async("async-victim", ttl=TTL)
            waiter = asyncio.ensure_future(lease.lost)
            await asyncio.sleep(0.05)
            assert not waiter.done()
            await asyncio.get_running_loop().run_in_executor(
                None, take_over, db_path, "async-victim"
            )
            assert await asyncio.wait_for(waiter, LONG) is True
            assert lease.is_lost
            with pytest.raises(fencelock.Lost):
                await lease.extend_async()
            with pytest.raises(fencelock.Lost):
                async with locker.lock("async-scope", ttl=TTL) as scoped:
                    await asyncio.get_running_loop().run_in_executor(
                        None, take_over, db_path, "async-scope"
                    )
                    await asyncio.wait_for(scoped.lost, LONG)
        finally:
            await locker.close_async()

    asyncio.run(main())


def test_awaiting_lost_can_be_cancelled(locker: fencelock.Locker) -> None:
    async def main() -> None:
        lease = await locker.acquire_async("calm", ttl=10)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(lease.lost, 0.2)
        await lease.release_async()

    asyncio.run(main())


def test_a_failing_renewal_shows_as_renewal_failing_and_is_suspended_until_one_succeeds(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys
    import time

    path = tmp_path / "locks.db"
    # busy_timeout_ms=0: a renewal that meets another writer's lock fails at once (and is retried).
    with fencelock.connect(f"sqlite://{path}?busy_timeout_ms=0") as locker:
        lease = locker.acquire("renewing", ttl=6)
        assert not lease.renewal_failing and not lease.is_suspended
        blocker = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sqlite3, sys\n"
                "con = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
                "con.execute('BEGIN EXCLUSIVE')\n"
                "print('locked', flush=True)\n"
                "sys.stdin.read()\n"
                "con.execute('ROLLBACK')\n",
                str(path),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert blocker.stdout is not None and blocker.stdout.readline().strip() == "locked"
            deadline = time.monotonic() + LONG
            while not lease.renewal_failing:
                assert time.monotonic() < deadline, "no renewal failed"
                time.sleep(0.02)
            assert lease.is_suspended and lease.is_held, "failing, not lost"
        finally:
            assert blocker.stdin is not None
            blocker.stdin.close()
            blocker.wait(LONG)
        deadline = time.monotonic() + LONG
        while lease.renewal_failing:
            assert time.monotonic() < deadline, "no renewal succeeded after the failure"
            time.sleep(0.02)
        assert not lease.is_suspended and lease.is_held
        lease.release()
