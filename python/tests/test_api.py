"""The synchronous API: locks, leases, threads, timeouts, scopes and the Locker's lifetime."""

import datetime
import gc
import os
import threading
import time
from typing import List

import pytest
from _blocking import BlockingCall
from conftest import LONG

import fencelock


def test_lock_is_lazy_and_yields_a_lease(locker: fencelock.Locker) -> None:
    lock = locker.lock("lazy", ttl=10)
    assert locker.inspect("lazy").token is None  # nothing sent yet
    with lock as lease:
        assert isinstance(lease, fencelock.Lease)
        assert lease.name == "lazy"
        assert isinstance(lease.token, int) and 0 < lease.token < 2**63
        assert lease.is_held and not lease.is_lost
        info = locker.inspect("lazy")
        assert info.held and info.token == lease.token
        assert info.holder is not None and info.holder["language"] == "python"
        assert info.time_left is not None and 0 < info.time_left <= 10
    assert not lease.is_held
    assert not locker.inspect("lazy").held


def test_holder_text_is_shown_by_inspect(locker: fencelock.Locker) -> None:
    with locker.lock("described", holder="nightly batch"):
        holder = locker.inspect("described").holder
        assert holder is not None and holder["text"] == "nightly batch"
        assert holder["pid"] == os.getpid()


def test_dropped_lease_is_released_in_the_background(locker: fencelock.Locker, url: str) -> None:
    lease = locker.acquire("dropped", ttl=10)
    token = lease.token
    del lease
    gc.collect()
    with fencelock.connect(url) as other:
        again = other.acquire("dropped", wait=LONG)  # long before the 10 s ttl runs out
        assert again.token > token
        again.release()


def test_expires_at_is_utc_aware(locker: fencelock.Locker) -> None:
    with locker.lock("expiry", ttl=20) as lease:
        at = lease.expires_at
        assert at is not None and at.tzinfo is not None
        assert at.utcoffset() == datetime.timedelta(0)
        now = datetime.datetime.now(datetime.timezone.utc)
        assert now < at <= now + datetime.timedelta(seconds=21)


def test_acquire_times_out(locker: fencelock.Locker, rival: fencelock.Locker) -> None:
    held = rival.acquire("slow", ttl=10)
    with pytest.raises(fencelock.Timeout, match="slow") as caught:
        locker.acquire("slow", wait=0.3)
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.code == "TIMEOUT"
    with pytest.raises(fencelock.Timeout):
        with locker.lock("slow", wait=datetime.timedelta(milliseconds=200)):
            pass
    with pytest.raises(fencelock.Timeout):
        locker.acquire("slow", wait=0)
    held.release()


def test_other_threads_run_while_one_waits(locker: fencelock.Locker) -> None:
    held = locker.acquire("gil", ttl=10)
    waiter = BlockingCall(lambda: locker.acquire("gil", ttl=10, wait=LONG), "acquire")
    waiter.entered()
    # Pure-Python work needs the GIL: it can only progress if the waiter released it.
    spins = 0
    until = time.monotonic() + 0.5
    while time.monotonic() < until:
        spins += 1
    assert spins > 0
    assert waiter.thread.is_alive()  # still waiting
    held.release()
    lease = waiter.outcome()
    assert lease.token > held.token
    lease.release()


def test_lease_released_from_another_thread(locker: fencelock.Locker) -> None:
    lease = locker.acquire("handover", ttl=10)
    errors = []

    def release() -> None:
        try:
            lease.release()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    thread = threading.Thread(target=release)
    thread.start()
    thread.join(LONG)
    assert not errors
    assert not lease.is_held
    again = locker.try_acquire("handover")
    assert again is not None
    again.release()


def test_explicit_release_inside_with_is_quiet(locker: fencelock.Locker) -> None:
    with locker.lock("early") as lease:
        lease.release()
    with pytest.raises(fencelock.NotHeld, match="already released"):
        lease.release()


def test_lease_is_a_context_manager(locker: fencelock.Locker) -> None:
    with locker.acquire("cm", ttl=5) as lease:
        assert lease.is_held
    assert not lease.is_held


def test_extend(locker: fencelock.Locker) -> None:
    with locker.lock("extend", ttl=5) as lease:
        before = lease.expires_at
        assert before is not None
        lease.extend(60)
        after = lease.expires_at
        assert after is not None and after > before
        lease.extend()  # the current ttl again
        lease.extend(datetime.timedelta(seconds=30))
        assert lease.is_held


def test_auto_renew_keeps_a_short_lease(locker: fencelock.Locker) -> None:
    with locker.lock("renewed", ttl=1.5) as lease:
        time.sleep(5.0)  # more than three ttls: only renewals keep it
        lease.raise_if_lost()
        assert lease.is_held


def test_without_auto_renew_the_lease_expires(locker: fencelock.Locker) -> None:
    lease = locker.acquire("expires", ttl=0.3, auto_renew=False)
    assert lease.lost.wait(LONG)
    assert lease.is_lost and lease.lost.reason == "expired"
    with pytest.raises(fencelock.Lost):
        lease.raise_if_lost()
    other = locker.acquire("expires", wait=LONG)
    assert other.token > lease.token
    other.release()


def test_max_hold_stops_renewing(locker: fencelock.Locker) -> None:
    lease = locker.acquire("bounded", ttl=0.3, max_hold=0.5)
    assert lease.lost.wait(LONG)
    assert lease.lost.reason == "expired"


def test_entering_the_same_lock_twice_in_one_thread_is_a_deadlock(locker: fencelock.Locker) -> None:
    lock = locker.lock("nested", ttl=5)
    with lock:
        with pytest.raises(fencelock.Deadlock, match='lock "nested" is already held by this scope'):
            with lock:
                pass
    with lock:  # usable again once left
        pass


def test_one_lock_object_shared_by_threads(locker: fencelock.Locker) -> None:
    lock = locker.lock("shared", ttl=10, wait=LONG)
    inside: List[int] = []
    overlap: List[bool] = []
    tokens: List[int] = []

    def work() -> None:
        for _ in range(3):
            with lock as lease:
                if inside:
                    overlap.append(True)
                inside.append(1)
                tokens.append(lease.token)
                time.sleep(0.01)
                inside.pop()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LONG * 2)
    assert not overlap
    assert len(tokens) == 12 and tokens == sorted(tokens)


def test_close_releases_what_the_locker_holds(url: str) -> None:
    locker = fencelock.connect(url)
    a = locker.acquire("a")
    b = locker.acquire("b")
    locker.close()
    assert locker.closed
    locker.close()  # twice is harmless
    assert not a.is_held and not b.is_held
    with fencelock.connect(url) as other:
        for name in ("a", "b"):
            lease = other.try_acquire(name)
            assert lease is not None
            lease.release()


def test_close_stops_a_waiting_acquire(url: str) -> None:
    locker = fencelock.connect(url)
    held = locker.acquire("closing-wait", ttl=10)
    waiter = BlockingCall(lambda: locker.acquire("closing-wait", wait=LONG), "acquire")
    waiter.entered()  # the close comes while the thread is in acquire(), not before
    locker.close()
    with pytest.raises(fencelock.Closed):
        waiter.outcome()
    assert not held.is_held


def test_with_connect_closes(url: str) -> None:
    with fencelock.connect(url) as locker:
        lease = locker.acquire("scoped")
    assert locker.closed and not lease.is_held
    with pytest.raises(fencelock.Closed):
        locker.acquire("scoped")


def test_leaving_after_close_is_quiet(url: str) -> None:
    locker = fencelock.connect(url)
    with locker.lock("closing"):
        locker.close()


def test_reprs_and_docs(locker: fencelock.Locker) -> None:
    assert "sqlite://" in repr(locker)
    with locker.lock("repr") as lease:
        assert "repr" in repr(lease) and "held" in repr(lease)
        assert "not set" in repr(lease.lost)
    assert "fencing" in (fencelock.Lease.__doc__ or "")
    assert "backend" in (fencelock.connect.__doc__ or "")
    assert "ttl=30" in (getattr(fencelock.Locker.lock, "__text_signature__", None) or "")
    assert fencelock.Timeout.__module__ == "fencelock._errors"
    assert fencelock.__version__


def test_pipelined_release_frees_the_lock(
    locker: fencelock.Locker, rival: fencelock.Locker
) -> None:
    tokens = []
    for _ in range(3):
        lease = locker.acquire("pipelined", pipelined_release=True, wait=LONG)
        tokens.append(lease.token)
        lease.release()  # returns once the release is sent; the reply is checked behind it
        assert not lease.is_held
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    with rival.lock("pipelined", wait=LONG) as lease:
        assert lease.token > tokens[-1]
