"""Several names as one lock (docs/design.md §1.9): `locker.lock_many(names)` with `with` and
`async with`, `locker.acquire_many(names)`, `acquire_many_async` and the `MultiLease`, on every
backend.

The core's conformance suite proves the semantics on every backend (all or nothing, one canonical
order, one token per name, lost when any part is); these tests prove the Python face of them: the
names as any iterable of str, the options, errors, re-entry per thread or task, Ctrl-C and
cancellation, the lost signal, a part guarding a Fence, and fork().
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import inspect
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest
from conftest import LONG, in_another_thread
from test_backends import fresh
from test_operations import wait_until

import fencelock


def fresh_names(prefix: str, count: int) -> List[str]:
    """`count` new names, in their canonical order (sorted)."""
    base = fresh(prefix)
    return [f"{base}-{i}" for i in range(count)]


def free(locker: fencelock.Locker, name: str) -> bool:
    """Whether `locker` can take `name` now (it gives it back at once)."""
    lease = locker.try_acquire(name)
    if lease is None:
        return False
    lease.release()
    return True


def test_holds_every_name_and_one_release_frees_them(
    any_locker: fencelock.Locker, any_rival: fencelock.Locker
) -> None:
    names = fresh_names("many", 3)
    # Given out of order: the lease lists them in the canonical order.
    lease = any_locker.acquire_many([names[2], names[0], names[1]], ttl=10, wait=LONG)
    assert isinstance(lease, fencelock.MultiLease)
    assert lease.names == names and list(lease.tokens) == names
    assert lease.is_held and not lease.is_lost and not lease.lost.is_set()
    lease.raise_if_lost()
    for name, token in lease.tokens.items():
        info = any_rival.inspect(name)
        assert info.held and info.token == token
        part = lease.part(name)
        assert isinstance(part, fencelock.Lease)
        assert part.name == name and part.token == token and part.mode == "exclusive"
        assert part is lease.part(name)
        assert any_rival.try_acquire(name) is None
    assert lease.part("not-a-part") is None
    until = lease.valid_until
    assert until.utcoffset() == datetime.timedelta(0)
    assert until > datetime.datetime.now(datetime.timezone.utc)
    # The earliest part's deadline. Read first, it is no later than any part's read after (the
    # parts renew meanwhile), give or take how the wall clock is read each time.
    slack = datetime.timedelta(seconds=1)
    parts = [lease.part(name) for name in names]
    assert all(part is not None and until <= part.valid_until + slack for part in parts)
    expires = lease.expires_at
    if expires is not None:
        assert until <= expires + slack
    lease.extend()
    lease.extend(ttl=datetime.timedelta(seconds=10))
    assert lease.is_held
    lease.release()
    assert not lease.is_held and not lease.is_lost and not lease.lost.is_set()
    assert "released" in repr(lease)
    for name in names:
        nxt = any_rival.try_acquire(name)
        assert nxt is not None, f"{name} is free after the release"
        assert nxt.token > lease.tokens[name]
        nxt.release()
    with pytest.raises(fencelock.NotHeld):
        lease.release()
    with pytest.raises(fencelock.NotHeld):
        lease.raise_if_lost()
    with pytest.raises(fencelock.NotHeld):
        lease.extend()


def test_with_lock_many_holds_them_inside_the_block(
    any_locker: fencelock.Locker, any_rival: fencelock.Locker
) -> None:
    names = fresh_names("with", 3)
    given = (names[1], names[2], names[0])
    lock = any_locker.lock_many(given, ttl=10, wait=LONG)
    assert isinstance(lock, fencelock.MultiLock) and lock.names == list(given)
    with lock as lease:
        assert isinstance(lease, fencelock.MultiLease) and lease.names == names
        assert all(any_rival.inspect(name).held for name in names)
    assert not lease.is_held
    assert all(free(any_rival, name) for name in names)
    # Any iterable of str: a generator, a set; and the lease itself releases on leaving.
    with any_locker.acquire_many(name for name in names) as lease:
        assert lease.names == names
    assert not lease.is_held
    with any_locker.lock_many(set(names), wait=LONG) as lease:
        assert lease.names == names
    assert all(free(any_rival, name) for name in names)
    # One name is a multi-lock too.
    with any_locker.lock_many([names[0]], wait=LONG) as lease:
        assert list(lease.tokens) == [names[0]]


def test_all_or_nothing(any_locker: fencelock.Locker, any_rival: fencelock.Locker) -> None:
    names = fresh_names("all-or-nothing", 3)
    # The middle name is busy: the first is taken, then given back when the wait runs out.
    busy = any_rival.acquire(names[1], ttl=10)
    with pytest.raises(fencelock.Timeout, match=re.escape(names[1])):
        any_locker.acquire_many(names, ttl=10, wait=0.3)
    with pytest.raises(fencelock.Timeout, match=re.escape(names[1])):
        with any_locker.lock_many(names, ttl=10, wait=0):
            pytest.fail("entered without every name")
    for name in (names[0], names[2]):
        assert free(any_rival, name), f"{name} was kept by a failed multi-lock"
    # Once the busy name is free, a waiting multi-lock gets all three.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        waiting = pool.submit(lambda: any_locker.acquire_many(names, ttl=10, wait=LONG))
        busy.release()
        lease = waiting.result(timeout=LONG * 2)
    assert lease.is_held and lease.names == names
    lease.release()


def test_opposite_orders_do_not_deadlock(
    any_locker: fencelock.Locker, any_rival: fencelock.Locker
) -> None:
    names = fresh_names("opposite", 2)
    rounds = 5

    def contend(locker: fencelock.Locker, order: List[str]) -> int:
        for _ in range(rounds):
            with locker.lock_many(order, ttl=10, wait=LONG) as lease:
                assert lease.names == names
        return rounds

    contenders: List[Tuple[fencelock.Locker, List[str]]] = [
        (any_locker, names),
        (any_rival, names[::-1]),
        # The same Locker from another thread: another scope, which contends.
        (any_locker, names[::-1]),
    ]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(contenders)) as pool:
        done = [pool.submit(contend, locker, order) for locker, order in contenders]
        assert [f.result(timeout=LONG * 4) for f in done] == [rounds] * len(contenders)
    assert all(free(any_rival, name) for name in names)


def test_lost_when_any_part_is(any_locker: fencelock.Locker, any_rival: fencelock.Locker) -> None:
    names = fresh_names("lost-part", 3)
    lease = any_locker.acquire_many(names, ttl=10)
    lost = lease.lost
    assert isinstance(lost, fencelock.LostSignal) and not lost.is_set()
    any_rival.force_release(names[1])
    # An extend asks the backend about every part: the forced one answers Lost.
    with pytest.raises(fencelock.Lost):
        lease.extend()
    assert lost.wait(LONG) and lease.lost.is_set()
    assert lost.reason == "taken_over"
    assert lease.is_lost and not lease.is_held and "lost" in repr(lease)
    with pytest.raises(fencelock.Lost, match=re.escape(names[1])):
        lease.raise_if_lost()
    forced, kept = lease.part(names[1]), lease.part(names[0])
    assert forced is not None and forced.is_lost
    assert kept is not None and kept.is_held
    # The release reports the loss, and still frees the parts that were held.
    with pytest.raises(fencelock.Lost):
        lease.release()
    assert not kept.is_held
    for name in (names[0], names[2]):
        assert free(any_rival, name)


def test_leaving_after_a_loss_raises_lost(
    any_locker: fencelock.Locker, any_rival: fencelock.Locker
) -> None:
    names = fresh_names("lost-with", 2)
    with pytest.raises(fencelock.Lost):
        with any_locker.lock_many(names, ttl=10, wait=LONG) as lease:
            any_rival.force_release(names[0])
            with pytest.raises(fencelock.Lost):
                lease.extend()
    # ... unless another exception is already on its way out.
    with pytest.raises(KeyError):
        with any_locker.lock_many(names, ttl=10, wait=LONG) as lease:
            any_rival.force_release(names[1])
            with pytest.raises(fencelock.Lost):
                lease.extend()
            raise KeyError("the block's own error")
    # An explicit release inside the block makes leaving quiet, as for lock().
    with any_locker.lock_many(names, ttl=10, wait=LONG) as lease:
        lease.release()
    assert all(free(any_rival, name) for name in names)


def test_a_part_guards_a_fence(
    any_locker: fencelock.Locker, any_rival: fencelock.Locker, tmp_path: Path
) -> None:
    names = fresh_names("fenced", 2)
    data = f"sqlite://{tmp_path / 'data.db'}"
    create: Tuple[str, List[Any]] = ("CREATE TABLE IF NOT EXISTS runs (token INTEGER)", [])
    with (
        fencelock.Fence.open(data, "orders") as orders,
        fencelock.Fence.open(data, "stock") as stock,
    ):
        with any_locker.lock_many(names, ttl=10, wait=LONG) as lease:
            order_part, stock_part = lease.part(names[0]), lease.part(names[1])
            assert order_part is not None and stock_part is not None
            orders.fenced_execute(
                order_part, [create, ("INSERT INTO runs VALUES (?)", [order_part.token])]
            )
            stock.fenced_execute(stock_part, [("INSERT INTO runs VALUES (?)", [stock_part.token])])
            assert orders.highest() == lease.tokens[names[0]]
            assert stock.highest() == lease.tokens[names[1]]
            # The whole has no one token: the fence says which to pass.
            with pytest.raises(fencelock.InvalidArgument, match=r"part\(name\)"):
                orders.fenced_execute(lease, [])  # type: ignore[arg-type]
        # A released part is no token any more; the next holder's newer token fences out the old.
        released = lease.part(names[0])
        assert released is not None and not released.is_held
        with pytest.raises(fencelock.NotHeld):
            orders.fenced_execute(released, [])
        with any_rival.lock(names[0], ttl=10, wait=LONG) as newer:
            orders.fenced_execute(newer, [("INSERT INTO runs VALUES (?)", [newer.token])])
        with pytest.raises(fencelock.StaleToken):
            orders.fenced_execute(lease.tokens[names[0]], [("DELETE FROM runs", [])])


#: Sets of names the core refuses, before anything is taken: (names, what the message says).
BAD_SETS: Dict[str, Tuple[List[str], str]] = {
    "none": ([], "at least one name"),
    "twice": (["{0}", "{1}", "{0}"], "twice"),
    "empty-name": (["{0}", ""], "empty"),
    "nul": (["{0}", "a\0b"], "NUL"),
    "too-many": ([f"{{0}}-{i}" for i in range(65)], "at most 64"),
}


@pytest.mark.parametrize("given,fragment", BAD_SETS.values(), ids=BAD_SETS.keys())
def test_bad_name_sets_are_refused_before_anything_is_taken(
    any_locker: fencelock.Locker, any_rival: fencelock.Locker, given: List[str], fragment: str
) -> None:
    names = fresh_names("refused", 2)
    bad = [name.format(*names) for name in given]
    with pytest.raises(fencelock.InvalidArgument, match=fragment):
        any_locker.acquire_many(bad)
    lock = any_locker.lock_many(bad, wait=0)  # the set is checked on entering
    with pytest.raises(fencelock.InvalidArgument, match=fragment):
        with lock:
            pytest.fail("entered a refused set")

    async def in_asyncio() -> None:
        with pytest.raises(fencelock.InvalidArgument, match=fragment):
            await any_locker.acquire_many_async(bad)
        with pytest.raises(fencelock.InvalidArgument, match=fragment):
            async with lock:
                pytest.fail("entered a refused set")

    asyncio.run(in_asyncio())
    assert all(free(any_rival, name) for name in names)


#: Names of the wrong type: InvalidArgument, and a TypeError, as `lock(123)` raises.
BAD_TYPES: Dict[str, Tuple[Any, str]] = {
    "int-element": (["a", 1], "lock name must be a str, got int"),
    "none-element": ([None], "lock name must be a str, got NoneType"),
    "bytes-element": ([b"a"], "lock name must be a str, got bytes"),
    "one-str": ("ab", "not one str; pass \\[name\\]"),
    "one-bytes": (b"ab", "not one bytes"),
    "not-iterable": (5, "iterable of str such as a list, got int"),
    "none": (None, "got NoneType"),
}


@pytest.mark.parametrize("names,fragment", BAD_TYPES.values(), ids=BAD_TYPES.keys())
def test_names_of_the_wrong_type(any_locker: fencelock.Locker, names: Any, fragment: str) -> None:
    for call in (any_locker.lock_many, any_locker.acquire_many, any_locker.acquire_many_async):
        with pytest.raises(fencelock.InvalidArgument, match=fragment) as raised:
            call(names)
        assert isinstance(raised.value, TypeError)


def test_options_are_lock_options(any_locker: fencelock.Locker) -> None:
    def keywords(function: Any) -> List[str]:
        parameters = inspect.signature(function).parameters.values()
        return [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]

    lock_keywords = keywords(fencelock.Locker.lock)
    for function in (
        fencelock.Locker.lock_many,
        fencelock.Locker.acquire_many,
        fencelock.Locker.acquire_many_async,
    ):
        assert keywords(function) == lock_keywords, function.__name__
    names = fresh_names("options", 2)
    with pytest.raises(fencelock.InvalidArgument, match="timeout="):
        any_locker.lock_many(names, timeout=5)  # type: ignore[call-arg]
    with pytest.raises(fencelock.InvalidArgument, match="unknown option"):
        any_locker.acquire_many(names, permits=2)  # type: ignore[call-arg]
    with pytest.raises(fencelock.InvalidArgument, match="ttl"):
        any_locker.acquire_many(names, ttl=-1)
    # Each part gets the options: here the holder text, seen by an observer.
    with any_locker.lock_many(names, ttl=10, holder="batch move", wait=LONG):
        for name in names:
            holder = any_locker.inspect(name).holder
            assert holder is not None and holder.get("text") == "batch move"


def test_re_entry_is_per_thread(any_locker: fencelock.Locker) -> None:
    names = fresh_names("reenter", 2)
    with any_locker.lock(names[0], ttl=10) as own:
        # This thread holds a part already: waiting for it would wait forever.
        with pytest.raises(fencelock.Deadlock, match=re.escape(names[0])):
            any_locker.acquire_many(names, ttl=10, wait=LONG)
        assert not any_locker.inspect(names[1]).held, "nothing kept"
        with any_locker.lock_many(names, ttl=10, reentrant=True, wait=LONG) as nested:
            part = nested.part(names[0])
            assert part is not None and part.token == own.token
            # Another thread is another scope: it contends.
            with pytest.raises(fencelock.Timeout):
                in_another_thread(lambda: any_locker.acquire_many(names, wait=0.2))
        assert own.is_held and any_locker.inspect(names[0]).held
        assert not any_locker.inspect(names[1]).held
    # One lock_many() object entered again in its own block.
    lock = any_locker.lock_many(names, ttl=10, reentrant=True)
    with lock as outer:
        with lock as inner:
            assert inner.tokens == outer.tokens
        assert outer.is_held
    plain = any_locker.lock_many(names, ttl=10)
    with plain as outer:
        with pytest.raises(fencelock.Deadlock):
            with plain:
                pytest.fail("entered twice")
        assert outer.is_held
    assert not any(any_locker.inspect(name).held for name in names)


def test_async_forms(any_locker: fencelock.Locker, any_rival: fencelock.Locker) -> None:
    names = fresh_names("async", 3)

    async def in_another_task() -> fencelock.MultiLease:
        return await any_locker.acquire_many_async(names, wait=0.2)

    async def main() -> None:
        lock = any_locker.lock_many(names[::-1], ttl=10, wait=LONG)
        async with lock as lease:
            assert lease.names == names and lease.is_held
            await lease.extend_async()
            # The same task holds them: Deadlock; another task contends (here: Timeout).
            with pytest.raises(fencelock.Deadlock):
                await any_locker.acquire_many_async(names, wait=0)
            with pytest.raises(fencelock.Timeout):
                await asyncio.create_task(in_another_task())
        assert not lease.is_held
        assert all(free(any_rival, name) for name in names)

        lease = await any_locker.acquire_many_async(names, ttl=10, wait=LONG)
        waiter = asyncio.ensure_future(lease.lost)
        await any_rival.force_release_async(names[2])
        with pytest.raises(fencelock.Lost):
            await lease.extend_async()
        assert await asyncio.wait_for(waiter, LONG) is True
        with pytest.raises(fencelock.Lost):
            await lease.release_async()
        assert all(free(any_rival, name) for name in names)

        async with await any_locker.acquire_many_async(names, ttl=10, wait=LONG) as held:
            assert held.is_held
        assert not held.is_held

    asyncio.run(main())


def test_cancelled_acquire_leaves_nothing_behind(
    any_locker: fencelock.Locker, any_rival: fencelock.Locker
) -> None:
    names = fresh_names("cancel", 2)

    async def main() -> None:
        busy = await any_rival.acquire_async(names[1], ttl=10)
        waiting = asyncio.ensure_future(any_locker.acquire_many_async(names, ttl=10))
        # Inside: the first name taken, waiting for the second.
        while not (await any_rival.inspect_async(names[0])).held:
            assert not waiting.done(), waiting
            await asyncio.sleep(0.02)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await busy.release_async()

    asyncio.run(main())
    # The first name is given back in the background.
    wait_until(lambda: free(any_rival, names[0]))
    assert free(any_rival, names[1])


def test_ctrl_c_interrupts_a_waiting_acquire_many(locker: fencelock.Locker, url: str) -> None:
    names = ["ctrl-c-a", "ctrl-c-b"]
    busy = locker.acquire(names[1], ttl=10)
    script = f"""
import sys, time
import fencelock
names = {names!r}
with fencelock.connect(sys.argv[1]) as locker:
    try:
        print("ready", flush=True)
        locker.acquire_many(names, ttl=10)
        print("acquired?!", flush=True)
        sys.exit(3)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    deadline = time.monotonic() + {LONG}
    while locker.inspect(names[0]).held and time.monotonic() < deadline:
        time.sleep(0.02)
    print("held" if locker.inspect(names[0]).held else "given back", flush=True)
"""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        # Inside acquire_many once it holds the first name and waits for the second.
        wait_until(lambda: locker.inspect(names[0]).held)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=LONG * 2)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.split() == ["interrupted", "given", "back"], out
    assert busy.is_held
    busy.release()
    assert free(locker, names[0]) and free(locker, names[1])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_an_inherited_multi_lease_is_inert_after_fork(locker: fencelock.Locker) -> None:
    names = ["forked-a", "forked-b"]
    lease = locker.acquire_many(names, ttl=10)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        report: Dict[str, Any] = {}
        try:
            os.close(read_end)
            for what in ("release", "extend", "raise_if_lost"):
                try:
                    getattr(lease, what)()
                    report[what] = "ok"
                except fencelock.LockError as e:
                    report[what] = e.code
            report["is_held"] = lease.is_held
            part = lease.part(names[0])
            report["part_held"] = part is not None and part.is_held
        except BaseException as e:  # noqa: BLE001 - sent to the parent
            report = {"error": repr(e)}
            code = 1
        os.write(write_end, json.dumps(report).encode())
        os.close(write_end)
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        report = json.loads(pipe.read().decode() or "{}")
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, report
    assert report == {
        "release": "CLOSED",
        "extend": "CLOSED",
        "raise_if_lost": "CLOSED",
        "is_held": False,
        "part_held": False,
    }
    # The parent's lease is untouched by the child.
    assert lease.is_held
    lease.extend()
    lease.release()


@pytest.fixture
def held_names(any_locker: fencelock.Locker) -> Iterator[Tuple[fencelock.MultiLease, List[str]]]:
    names = fresh_names("repr", 2)
    lease = any_locker.acquire_many(names, ttl=10)
    yield lease, names
    if lease.is_held:
        lease.release()


def test_reprs_show_names_and_tokens_only(
    any_locker: fencelock.Locker, held_names: Tuple[fencelock.MultiLease, List[str]]
) -> None:
    lease, names = held_names
    text = repr(lease)
    assert text.startswith("<fencelock.MultiLease") and "held" in text
    for name, token in lease.tokens.items():
        assert f'"{name}": {token}' in text
    lock = any_locker.lock_many(names, ttl=10, wait=5)
    assert repr(lock).startswith("<fencelock.MultiLock") and names[0] in repr(lock)
    # Never the URL (nor so its password).
    assert "://" not in text and "://" not in repr(lock)
    assert "part(name)" in (fencelock.MultiLease.__doc__ or "")
    assert "ttl=30" in (getattr(fencelock.Locker.lock_many, "__text_signature__", None) or "")
