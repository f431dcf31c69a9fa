"""Semaphores and read-write locks (issue 29): `locker.semaphore(name, permits)`,
`locker.read_lock(name)` and `locker.write_lock(name)`, with `with` and `async with`, on every
backend that offers them; Redlock offers read-write locks and refuses semaphores (docs/design.md
§1.8).

The core's conformance suite tests the semantics in depth on every backend; these tests prove the
Python face of them: the options, errors, re-entry per thread or task and lost signal of
`locker.lock(...)`, `Lease.mode`, and `LockInfo.kind`, `permits` and `leases`. Each holder that
must stay inside while the test looks runs in a thread or task of its own: another scope, which
contends, where the test's own thread would get Deadlock.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Optional, Tuple

import pytest
from conftest import LONG, in_another_thread
from test_backends import fresh
from test_errors import BAD_NAMES
from test_operations import wait_until

import fencelock

#: The URL schemes of the backends that do not offer semaphores (every one offers read-write
#: locks).
NO_SEMAPHORES = ("redlock://",)


def offers(locker: fencelock.Locker, mode: str) -> bool:
    return mode != "permit" or not locker.url.startswith(NO_SEMAPHORES)


@pytest.fixture
def kinds_locker(any_locker: fencelock.Locker) -> fencelock.Locker:
    """A backend that offers semaphores and read-write locks alike."""
    if not offers(any_locker, "permit"):
        pytest.skip("no semaphores here (test_refused_where_not_offered)")
    return any_locker


@pytest.fixture
def kinds_rival(kinds_locker: fencelock.Locker, any_rival: fencelock.Locker) -> fencelock.Locker:
    return any_rival


if TYPE_CHECKING:
    # Generic in the stubs only: annotations here are not evaluated (PEP 563).
    Lock = fencelock.Lock[fencelock.Lease]


def held_once(lock: Lock) -> fencelock.Lease:
    """Enters `lock` in this thread and leaves at once; returns the (released) lease."""
    with lock as lease:
        pass
    return lease


class Holding:
    """Holds `lock` in a thread of its own (a scope of its own) until `leave()`."""

    def __init__(self, lock: Lock) -> None:
        self._lock = lock
        self._entered = threading.Event()
        self._leave = threading.Event()
        self.lease: Optional[fencelock.Lease] = None
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._hold, daemon=True)
        self._thread.start()

    def _hold(self) -> None:
        try:
            with self._lock as lease:
                self.lease = lease
                self._entered.set()
                self._leave.wait(LONG * 2)
        except BaseException as e:  # noqa: BLE001 - handed to the test by entered()/leave()
            self.error = e
        finally:
            self._entered.set()

    def inside(self) -> bool:
        return self.lease is not None and not self._leave.is_set()

    def entered(self) -> fencelock.Lease:
        """The lease, once the thread got in; raises what entering raised."""
        assert self._entered.wait(LONG), "never got in"
        if self.error is not None:
            raise self.error
        assert self.lease is not None
        return self.lease

    def leave(self) -> None:
        self._leave.set()
        self._thread.join(LONG)
        assert not self._thread.is_alive(), "the holder did not leave"
        if self.error is not None:
            raise self.error


def leave_all(holdings: List[Holding]) -> None:
    for holding in holdings:
        holding._leave.set()
    for holding in holdings:
        holding._thread.join(LONG)


def makers(locker: fencelock.Locker) -> Dict[str, Callable[..., Lock]]:
    """Each new kind's constructor, taking (name, **options)."""
    return {
        "permit": lambda name, **kw: locker.semaphore(name, 2, **kw),
        "read": locker.read_lock,
        "write": locker.write_lock,
    }


def test_refused_where_not_offered(any_locker: fencelock.Locker) -> None:
    for mode, make in makers(any_locker).items():
        name = fresh(f"offered-{mode}")
        if offers(any_locker, mode):
            with make(name, ttl=10, wait=0) as lease:
                assert lease.mode == mode and lease.name == name
        else:
            # Refused when the object is made, before anything is sent.
            with pytest.raises(fencelock.InvalidArgument, match="does not offer") as caught:
                make(name)
            assert caught.value.code == "INVALID_ARGUMENT"


def test_n_permits_at_once_and_the_next_waits_for_a_release(
    kinds_locker: fencelock.Locker, kinds_rival: fencelock.Locker
) -> None:
    name = fresh("sem")
    lock = kinds_locker.semaphore(name, permits=3, ttl=10, wait=LONG)
    holders = [Holding(lock) for _ in range(3)]
    try:
        leases = [h.entered() for h in holders]
        assert [lease.mode for lease in leases] == ["permit"] * 3
        tokens = [lease.token for lease in leases]
        assert len(set(tokens)) == 3, "each permit has a token of its own"
        # A fourth: from this thread (which holds no permit) and from another client.
        for locker in (kinds_locker, kinds_rival):
            with pytest.raises(fencelock.Timeout):
                held_once(locker.semaphore(name, 3, wait=0.2))
        waiter = Holding(kinds_rival.semaphore(name, 3, ttl=10, wait=LONG))
        holders.append(waiter)
        wait_until(lambda: kinds_locker.inspect(name).waiters != [])
        assert not waiter.inside()
        holders.pop(1).leave()
        assert waiter.entered().token > max(tokens)
    finally:
        leave_all(holders)


def test_permits_names_and_options_are_checked(locker: fencelock.Locker) -> None:
    for permits in [0, -1, 10_001, 2**64]:
        with pytest.raises(fencelock.InvalidArgument, match="permits must be 1 to 10000") as caught:
            locker.semaphore("sem-args", permits)
        assert not isinstance(caught.value, TypeError)
    wrong_types: List[Any] = ["3", 3.0, True, None]
    for permits in wrong_types:
        with pytest.raises(fencelock.InvalidArgument, match="permits must be an int") as bad:
            locker.semaphore("sem-args", permits)
        assert isinstance(bad.value, TypeError)
    for permits in [1, 10_000]:
        assert held_once(locker.semaphore(f"sem-{permits}", permits, wait=0)).mode == "permit"
    with pytest.raises(TypeError):
        locker.semaphore("sem-args")  # type: ignore[call-arg]
    for make in makers(locker).values():
        for name, fragment in BAD_NAMES.values():
            with pytest.raises(fencelock.InvalidArgument, match=fragment):
                make(name)
        with pytest.raises(fencelock.InvalidArgument, match="ttl="):
            make("opts", timeout=5)
        with pytest.raises(fencelock.InvalidArgument, match="too short"):
            make("opts", ttl=0)
        with pytest.raises(fencelock.InvalidArgument, match="unknown option"):
            make("opts", ttl_ms=5)


def test_every_holder_uses_one_count_and_a_name_is_one_kind(locker: fencelock.Locker) -> None:
    with locker.semaphore("agree", 2, ttl=10):
        with pytest.raises(fencelock.InvalidArgument, match="has 2 permits"):
            in_another_thread(lambda: held_once(locker.semaphore("agree", 3, wait=5)))
    # Idle now: a new count replaces the old.
    assert held_once(locker.semaphore("agree", 3, wait=0)).mode == "permit"

    with locker.lock("one-kind", ttl=10):
        # This thread holds it as a mutex; another thread asks the backend. Both refuse at once.
        with pytest.raises(fencelock.InvalidArgument, match="mutex"):
            held_once(locker.read_lock("one-kind", wait=5))
        with pytest.raises(fencelock.InvalidArgument, match="mutex"):
            in_another_thread(lambda: held_once(locker.semaphore("one-kind", 2, wait=5)))


def test_readers_share_and_a_writer_excludes(
    any_locker: fencelock.Locker, any_rival: fencelock.Locker
) -> None:
    kinds_locker, kinds_rival = any_locker, any_rival
    name = fresh("rw")
    readers = [
        Holding(kinds_locker.read_lock(name, ttl=10, wait=LONG)),
        Holding(kinds_rival.read_lock(name, ttl=10, wait=LONG)),
    ]
    try:
        reads = [h.entered() for h in readers]
        assert [r.mode for r in reads] == ["read", "read"]
        for locker in (kinds_locker, kinds_rival):
            with pytest.raises(fencelock.Timeout):
                held_once(locker.write_lock(name, wait=0.2))
    finally:
        leave_all(readers)
    with kinds_locker.write_lock(name, ttl=10, wait=LONG) as write:
        assert write.mode == "write" and write.token > max(r.token for r in reads)
        with pytest.raises(fencelock.Timeout):
            in_another_thread(lambda: held_once(kinds_locker.read_lock(name, wait=0)))
        with pytest.raises(fencelock.Timeout):
            held_once(kinds_rival.read_lock(name, wait=0))
        with pytest.raises(fencelock.Timeout):
            held_once(kinds_rival.write_lock(name, wait=0))


def test_a_waiting_writer_goes_before_new_readers(
    any_locker: fencelock.Locker, any_rival: fencelock.Locker
) -> None:
    kinds_locker, kinds_rival = any_locker, any_rival
    name = fresh("rw-queue")
    reader = Holding(kinds_locker.read_lock(name, ttl=10))
    holdings = [reader]
    try:
        first = reader.entered()
        writer = Holding(kinds_rival.write_lock(name, ttl=10, wait=LONG))
        holdings.append(writer)
        wait_until(lambda: kinds_locker.inspect(name).waiters != [])
        assert not writer.inside()
        # Only readers hold the lock, yet a new reader queues behind the waiting writer.
        with pytest.raises(fencelock.Timeout):
            held_once(kinds_locker.read_lock(name, wait=0))
        reader.leave()
        write = writer.entered()
        assert write.mode == "write" and write.token > first.token
    finally:
        leave_all(holdings)


def test_async_with_each_kind(kinds_locker: fencelock.Locker) -> None:
    sem, rw = fresh("async-sem"), fresh("async-rw")

    async def main() -> None:
        # Six tasks, two permits: never more than two inside; every permit its own token.
        semaphore = kinds_locker.semaphore(sem, permits=2, ttl=10, wait=LONG)
        inside: List[int] = [0]
        tokens: List[int] = []

        async def permit_holder() -> None:
            async with semaphore as lease:
                inside[0] += 1
                assert inside[0] <= 2 and lease.mode == "permit"
                tokens.append(lease.token)
                await asyncio.sleep(0.005)
                inside[0] -= 1

        await asyncio.wait_for(asyncio.gather(*(permit_holder() for _ in range(6))), LONG)
        assert len(set(tokens)) == 6

        # Another task shares a read lock; a writer in another task cannot get in.
        async def enter_once(lock: Lock) -> fencelock.Lease:
            async with lock as lease:
                pass
            return lease

        async with kinds_locker.read_lock(rw, ttl=10) as read:
            assert read.mode == "read"
            other = await asyncio.create_task(enter_once(kinds_locker.read_lock(rw, wait=0)))
            assert other.mode == "read"
            with pytest.raises(fencelock.Timeout):
                await asyncio.create_task(enter_once(kinds_locker.write_lock(rw, wait=0)))
        async with kinds_locker.write_lock(rw, ttl=10, wait=LONG) as write:
            assert write.mode == "write" and write.token > read.token

        # Readers and writers in tasks of one thread never overlap a writer.
        state = {"readers": 0, "writers": 0}

        async def use(lock: Lock, role: str) -> None:
            async with lock:
                state[role] += 1
                assert state["writers"] == 0 or state == {"readers": 0, "writers": 1}
                await asyncio.sleep(0.005)
                state[role] -= 1

        def reader() -> Awaitable[None]:
            return use(kinds_locker.read_lock(rw, ttl=10, wait=LONG), "readers")

        def writer() -> Awaitable[None]:
            return use(kinds_locker.write_lock(rw, ttl=10, wait=LONG), "writers")

        await asyncio.wait_for(asyncio.gather(reader(), writer(), reader(), writer()), LONG)

        # Re-entry is per task, as for lock().
        again = kinds_locker.semaphore(sem, 2, ttl=10, reentrant=True, wait=0)
        async with again as outer:
            async with again as inner:
                assert inner.token == outer.token
            with pytest.raises(fencelock.Deadlock):
                await enter_once(kinds_locker.semaphore(sem, 2, wait=0))

    asyncio.run(main())


def test_re_entry_per_thread_follows_the_rules_of_lock(kinds_locker: fencelock.Locker) -> None:
    sem, rw = fresh("sem-reenter"), fresh("rw-reenter")
    permit = kinds_locker.semaphore(sem, 2, ttl=10, reentrant=True, wait=0)
    with permit as outer:
        with permit as inner:
            assert inner.token == outer.token and inner.mode == "permit"
        # Another thread contends: it takes the second permit rather than re-entering.
        other = in_another_thread(lambda: held_once(permit))
        assert other.token != outer.token
        with pytest.raises(fencelock.Deadlock, match=sem):
            held_once(kinds_locker.semaphore(sem, 2))
    with kinds_locker.write_lock(rw, ttl=10, reentrant=True) as write:
        # The writer may read what it writes: the same lease.
        with kinds_locker.read_lock(rw, reentrant=True, wait=0) as read:
            assert read.token == write.token
    with kinds_locker.read_lock(rw, ttl=10, reentrant=True):
        # The write lock would wait for this thread's own read lease forever.
        with pytest.raises(fencelock.Deadlock, match="read lease"):
            held_once(kinds_locker.write_lock(rw, reentrant=True))


def test_only_a_write_lease_guards_a_fence(kinds_locker: fencelock.Locker, data_url: str) -> None:
    sem, rw = fresh("fenced-sem"), fresh("fenced-rw")
    statements: List[Tuple[str, List[Any]]] = [
        ("CREATE TABLE IF NOT EXISTS report (token INTEGER)", []),
        ("INSERT INTO report VALUES (1)", []),
    ]
    with fencelock.Fence.open(data_url, "report") as fence:
        for lock in (kinds_locker.semaphore(sem, 2, ttl=10), kinds_locker.read_lock(rw, ttl=10)):
            with lock as lease:
                with pytest.raises(fencelock.InvalidArgument, match="cannot guard a fence"):
                    fence.fenced_execute(lease, statements)
                with pytest.raises(fencelock.InvalidArgument, match="cannot guard a fence"):
                    fence.check(lease)
                assert lease.is_held
        assert fence.highest() is None
        with kinds_locker.write_lock(rw, ttl=10) as write:
            fence.fenced_execute(write, statements)
            assert fence.highest() == write.token


def test_mode_and_inspect_show_each_kind(
    kinds_locker: fencelock.Locker, kinds_rival: fencelock.Locker
) -> None:
    mutex, sem, rw = fresh("kind-mutex"), fresh("kind-sem"), fresh("kind-rw")
    unused = kinds_locker.inspect(fresh("kind-unused"))
    assert (unused.kind, unused.permits, unused.leases, unused.held) == ("mutex", None, [], False)
    with kinds_locker.lock(mutex, ttl=10) as lease:
        assert lease.mode == "exclusive"
        info = kinds_locker.inspect(mutex)
        assert (info.kind, info.permits, info.leases, info.held) == ("mutex", None, [], True)

    holders = [
        Holding(locker.semaphore(sem, 3, ttl=10, holder="nightly report"))
        for locker in (kinds_locker, kinds_rival)
    ]
    try:
        tokens = sorted(h.entered().token for h in holders)
        # Polled: another client's change may reach the server this Locker reads from later.
        wait_until(lambda: sorted(s["token"] for s in kinds_locker.inspect(sem).leases) == tokens)
        info = kinds_locker.inspect(sem)
        assert (info.kind, info.permits, info.held, info.holder) == ("semaphore", 3, True, None)
        assert "semaphore" in repr(info)
        for shown in info.leases:
            assert set(shown) == {"mode", "token", "holder", "time_left"}, shown
            assert shown["mode"] == "permit"
            assert shown["holder"]["text"] == "nightly report", shown
            assert shown["holder"]["language"] == "python", shown
            assert shown["time_left"] is None or 0 < shown["time_left"] <= 10, shown
    finally:
        leave_all(holders)

    with kinds_locker.write_lock(rw, ttl=10) as write:
        assert "mode=write" in repr(write)
        info = kinds_locker.inspect(rw)
        assert (info.kind, info.permits, info.held) == ("read-write lock", None, True)
        assert [(s["mode"], s["token"]) for s in info.leases] == [("write", write.token)]
    wait_until(lambda: not kinds_locker.inspect(rw).held)
    assert kinds_locker.inspect(rw).leases == []


def test_a_lost_lease_sets_the_signal_and_leaving_raises_lost(
    kinds_locker: fencelock.Locker,
) -> None:
    rw, sem = fresh("rw-lost"), fresh("sem-lost")
    # A short ttl: renewals (every third of it) notice the forced release soon.
    with pytest.raises(fencelock.Lost):
        with kinds_locker.read_lock(rw, ttl=1.5) as read:
            kinds_locker.force_release(rw)
            assert read.lost.wait(LONG)
            assert read.is_lost and read.lost.reason in ("taken_over", "expired")

    async def main() -> None:
        with pytest.raises(fencelock.Lost):
            async with kinds_locker.semaphore(sem, 2, ttl=1.5) as permit:
                await kinds_locker.force_release_async(sem)
                assert await asyncio.wait_for(permit.lost, LONG)

    asyncio.run(main())
