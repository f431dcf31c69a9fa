"""Inspection, administration, lifecycle events and logging (issue 13), on every backend
this machine offers (see test_backends.py for how backends are picked)."""

import logging
import os
import threading
import time
from typing import List

import pytest
from conftest import LONG
from test_backends import fresh

import fencelock


def wait_until(predicate, within: float = LONG) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_inspect_list_and_force_release(any_locker: fencelock.Locker) -> None:
    name = fresh("ops") + "/job*"
    lease = any_locker.acquire(name, ttl=6, holder="nightly report")
    info = any_locker.inspect(name)
    assert info.held and info.token == lease.token
    assert info.holder is not None
    assert info.holder["language"] == "python" and info.holder["pid"] == os.getpid()
    assert info.holder["text"] == "nightly report" and info.holder["host"]
    assert info.waiters == []
    listed = any_locker.list(name[:-1])
    assert not listed.truncated
    assert [i.name for i in listed] == [name] and listed[0].token == lease.token
    # The prefix is data: a wildcard matches only a name that spells it.
    assert len(any_locker.list(name[:-4] + "*")) == 0

    any_locker.force_release(name)
    # Within one renewal interval (ttl/3; on ZooKeeper at once) plus a generous margin.
    assert lease.lost.wait(2 + 10), "the holder was not told"
    assert lease.is_lost
    with pytest.raises(fencelock.Lost):
        lease.release()
    assert not any_locker.inspect(name).held
    assert len(any_locker.list(name[:-1])) == 0
    with pytest.raises(fencelock.NotHeld):
        any_locker.force_release(name)


def test_bad_inputs_get_typed_errors(any_locker: fencelock.Locker) -> None:
    with pytest.raises(fencelock.InvalidArgument):
        any_locker.list("a\0b")
    with pytest.raises(fencelock.InvalidArgument):
        any_locker.list("x" * 256)
    with pytest.raises(fencelock.InvalidArgument):
        any_locker.force_release("")
    with pytest.raises(fencelock.NotHeld):
        any_locker.force_release(fresh("never-held"))
    with pytest.raises(fencelock.InvalidArgument):
        any_locker.on_event(lambda e: None, kinds=["exploded"])
    with pytest.raises(fencelock.InvalidArgument):
        any_locker.on_event("not callable")  # type: ignore[arg-type]


def test_events_arrive_in_order_including_a_loss(any_locker: fencelock.Locker) -> None:
    name = fresh("events")
    seen: List[fencelock.LockEvent] = []
    done = threading.Event()

    def on_event(event: fencelock.LockEvent) -> None:
        if event.name == name:
            seen.append(event)
            if event.kind == "lost":
                done.set()

    subscription = any_locker.on_event(on_event)
    lease = any_locker.acquire(name, ttl=0.9)
    wait_until(lambda: any(e.kind == "renewed" for e in seen))
    lease.release()
    wait_until(lambda: any(e.kind == "released" for e in seen))
    second = any_locker.acquire(name, ttl=3)
    any_locker.force_release(name)
    assert done.wait(LONG)
    subscription.close()
    kinds = [e.kind for e in seen]
    first_life = kinds[: kinds.index("released") + 1]
    second_life = kinds[len(first_life) :]
    assert first_life[0] == "acquired" and set(first_life[1:-1]) == {"renewed"}, kinds
    assert second_life[0] == "acquired" and second_life[-1] == "lost", kinds
    assert set(second_life[1:-1]) <= {"renewed"}, kinds
    assert all(e.token == lease.token for e in seen[: len(first_life)])
    assert all(e.token == second.token for e in seen[len(first_life) :])
    lost = seen[-1]
    assert lost.reason and "no longer ours" in lost.reason
    assert lost.backend == seen[0].backend and lost.timestamp >= seen[0].timestamp


def test_events_can_be_read_without_a_callback(url: str) -> None:
    with fencelock.connect(url) as locker:
        events = locker.events()
        locker.acquire("pull", ttl=10).release()
        got = [events.next(timeout=LONG), events.next(timeout=LONG)]
        assert [e.kind for e in got if e] == ["acquired", "released"]
        assert events.next(timeout=0.05) is None
    # Closing the Locker ends the subscription: iterating it stops.
    assert list(events) == [] and events.closed


def test_the_library_logs_through_logging(
    any_locker: fencelock.Locker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="fencelock")
    name = fresh("logs")
    lease = any_locker.acquire(name, ttl=3)
    any_locker.force_release(name)
    assert lease.lost.wait(LONG)

    def logged() -> bool:
        return any(
            r.name == "fencelock" and "lost" in r.getMessage() and name in r.getMessage()
            for r in caplog.records
        )

    # The bridge thread notices the logger's level within 2 s; records arrive asynchronously.
    wait_until(logged)
    record = next(r for r in caplog.records if r.name == "fencelock" and name in r.getMessage())
    assert record.levelno == logging.WARNING
    assert getattr(record, "lock_name", None) == name
    assert any("force-released" in r.getMessage() for r in caplog.records if r.name == "fencelock")
