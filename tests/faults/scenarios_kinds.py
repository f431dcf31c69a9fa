"""The fault scenarios of semaphores and read-write locks (scenarios.toml names them; the mutex's
are in scenarios.py). Every worker (Rust, Python, Node, JVM) takes permits and read or write
leases, and the short profile rotates the languages through the roles as for the mutex.

A permit or read holder cannot fence, so what it does under its lease is a critical section
(`begin` .. `end`, or a whole `hold`) that the checker judges against the others' (README.md).
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import checker
from runs import Run, Worker, lease_ttl_ms, now_us
from scenarios import acquire_retrying, first_of, scenario, stale_holder_writes


def permit(p: dict[str, Any]) -> dict[str, Any]:
    return {"mode": "permit", "permits": p["permits"]}


def most_at_once(run: Run, modes: set[str]) -> int:
    """The most critical sections of these modes that ran together at one moment (as the
    checker judges them: each ends at its lease's deadline at the latest)."""
    acquired = [r for r in run.records if r.get("rec") == "acquired"]
    sections = checker._merged(checker._sections(run.records, acquired, checker.Verdict()))
    best, running = 0, []
    for s in sections:
        running = [r for r in running if r.end > s.start] + [s]
        best = max(best, sum(1 for r in running if r.mode in modes))
    return best


async def expect_refused_fence(run: Run, w: Worker, what: str) -> None:
    """A permit or read lease offered to a fence: INVALID_ARGUMENT by design, nothing written."""
    wr = await w.call("write", mode="lease")
    run.expect(
        not wr.get("accepted") and wr.get("code") == "INVALID_ARGUMENT",
        f"the fence refuses {what} with INVALID_ARGUMENT (got {wr.get('code')})",
    )


async def stale_shared_holder(
    run: Run, a: Worker, hold: "asyncio.Future[dict[str, Any]]", what: str
) -> None:
    """After a fault that let others in: the stale permit or read holder reads lost, may not
    begin a critical section, its signal fired, and its release reports LOST."""
    held = await asyncio.wait_for(hold, 120)
    run.expect(held.get("ok") and held.get("lost"), f"the stale holder reads lost after {what}")
    begun = await a.call("begin")
    run.expect(
        not begun.get("started") and begun.get("code") == "LOST",
        f"it may not begin a critical section: LOST (got {begun.get('code')})",
    )
    sig = [r for r in run.records if r.get("rec") == "lost_signal" and r["worker"] == a.name]
    run.expect(bool(sig), "its lost signal fired")
    rel = await a.call("release")
    run.expect(
        not rel.get("ok") and rel.get("code") == "LOST",
        f"its release reports LOST (got {rel.get('code')})",
    )


# How long a holder that got in works before the scenario goes on: a lease granted too early
# overlaps the earlier one's section by about that much, well above the checker's tolerance.
WORK_S = 0.3


async def work_and_release(run: Run, w: Worker, what: str) -> None:
    """A holder's critical section, then its release."""
    begun = await w.call("begin")
    run.expect(begun.get("started"), f"{w.name} ({what}) began its critical section")
    await asyncio.sleep(WORK_S)
    await w.call("probe")
    await w.call("end")
    rel = await w.call("release")
    run.expect(rel.get("ok"), f"{w.name} ({what}) released (got {rel.get('code') or 'ok'})")


@scenario("semaphore-contention")
async def semaphore_contention(run: Run, p: dict[str, Any]) -> None:
    """More clients than permits take turns; each cycle is one critical section."""
    ws = [await run.worker(i) for i in range(p["clients"])]
    cmd = {"ttl_ms": p["ttl_ms"], "count": p["cycles"], "hold_ms": p["hold_ms"], **permit(p)}
    replies = await asyncio.gather(*(w.call("cycle", timeout=120, **cmd) for w in ws))
    run.expect(
        all(r.get("ok") and r.get("cycles") == p["cycles"] for r in replies),
        "every client completed its cycles",
    )
    together = most_at_once(run, {"permit"})
    run.expect(
        together == p["permits"],
        f"the semaphore let {p['permits']} hold at once, no more ({together} at most)",
    )


@scenario("rwlock-contention")
async def rwlock_contention(run: Run, p: dict[str, Any]) -> None:
    """Readers and writers take turns; writers write through the fence in their sections."""
    ws = [await run.worker(i) for i in range(len(p["modes"]))]
    cmd = {"ttl_ms": p["ttl_ms"], "count": p["cycles"], "hold_ms": p["hold_ms"], "writes": 2}
    replies = await asyncio.gather(
        *(w.call("cycle", timeout=120, modes=modes, **cmd) for w, modes in zip(ws, p["modes"]))
    )
    run.expect(
        all(r.get("ok") and r.get("cycles") == p["cycles"] for r in replies),
        "every client completed its cycles",
    )
    run.expect(most_at_once(run, {"read"}) >= 2, "readers held the lock together")


@scenario("semaphore-kill9")
async def semaphore_kill9(run: Run, p: dict[str, Any]) -> None:
    """kill -9 of one of two permit holders of a semaphore of 2: the other holder goes on, and
    one of two waiters gets the permit within the ttl + margin; the other waits for a release."""
    ttl, mode = p["ttl_ms"], permit(p)
    life = lease_ttl_ms(run.backend, ttl)
    a, b, c, d = [await run.worker(i) for i in range(4)]
    for w in (a, b):
        got = await acquire_retrying(run, w, ttl, 30, **mode)
        if not run.expect(got.get("ok"), f"{w.name} acquired a permit"):
            return
    await expect_refused_fence(run, a, "a permit lease")
    await b.call("begin")
    a.send("hold", ms=60000, probe_ms=50)
    waiting = {w: w.send("acquire", ttl_ms=ttl, wait_ms=life + 60000, **mode) for w in (c, d)}
    await asyncio.sleep(0.5)
    run.expect(
        not any(f.done() and f.result().get("ok") for f in waiting.values()),
        "no waiter got a third permit",
    )
    t_kill = now_us()
    a.signal(signal.SIGKILL, "kill")
    first, reply = await first_of(waiting, life / 1000 + 60)
    t_got = now_us()
    margin_ms = p["margin_ms"]
    run.expect(reply.get("ok"), f"a waiter ({first.name}) got the permit after the kill")
    run.expect(
        t_got - t_kill <= (life + margin_ms) * 1000,
        f"within ttl + {margin_ms} ms of the kill ({(t_got - t_kill) // 1000} ms; ttl {life} ms)",
    )
    await first.call("begin")
    await asyncio.sleep(WORK_S)
    held = await b.call("probe")
    run.expect(held.get("lost") is False, f"the other holder ({b.name}) still holds its permit")
    await b.call("end")
    rel = await b.call("release")
    run.expect(rel.get("ok"), f"{b.name} released its permit (got {rel.get('code') or 'ok'})")
    other = next(w for w in waiting if w is not first)
    reply = await asyncio.wait_for(waiting[other], 60)
    if run.expect(reply.get("ok"), f"the other waiter ({other.name}) got the freed permit"):
        await work_and_release(run, other, "permit")
    await first.call("end")
    await first.call("release")


async def stop_a_shared_holder(run: Run, p: dict[str, Any], mode: dict[str, Any]) -> None:
    """A and B hold (permits of a semaphore of 2, or reads); A is stopped past its ttl; C waits
    (a permit, or the write lock) and gets in once A's lease expired; SIGCONT: A reads lost."""
    ttl = p["ttl_ms"]
    life = lease_ttl_ms(run.backend, ttl)
    reading = mode["mode"] == "read"
    a, b, c = [await run.worker(i) for i in range(3)]
    for w in (a, b):
        got = await acquire_retrying(run, w, ttl, 30, **mode)
        if not run.expect(got.get("ok"), f"{w.name} acquired ({mode['mode']})"):
            return
    await expect_refused_fence(run, a, f"a {mode['mode']} lease")
    await b.call("begin")
    hold = a.send("hold", ms=life + 60000, probe_ms=50, stop_after_lost=5)
    await asyncio.sleep(0.3)
    a.signal(signal.SIGSTOP, "sigstop")
    want = {"mode": "write"} if reading else mode
    waiting = c.send("acquire", ttl_ms=ttl, wait_ms=life + 60000, **want)
    late_reader = None
    if reading:
        # A writer waits now: a new reader queues behind it, though only readers hold.
        await asyncio.sleep(0.5)
        late_reader = await run.worker(3)
        late = late_reader.send("acquire", ttl_ms=ttl, wait_ms=life + 60000, mode="read")
        await asyncio.sleep(0.5)
        run.expect(not late.done(), "a reader arriving while a writer waits queues behind it")
        # ... and the writer needs B gone too.
        await b.call("end")
        rel = await b.call("release")
        run.expect(rel.get("ok"), f"{b.name} released its read lease")
    t_stop = time.monotonic()
    reply = await asyncio.wait_for(waiting, life / 1000 + 60)
    run.expect(
        reply.get("ok"),
        f"{c.name} got in ({want['mode']}) while the holder was stopped "
        f"({time.monotonic() - t_stop:.1f} s after)",
    )
    await c.call("begin")
    if reading:
        w = await c.call("write", mode="lease")
        run.expect(w.get("accepted"), "the writer's fenced write was accepted")
    else:
        held = await b.call("probe")
        run.expect(held.get("lost") is False, f"the other holder ({b.name}) still holds")
    # C works a while before A resumes: had A's lease outlived its deadline, their sections
    # would overlap by that much, which the checker would see.
    await asyncio.sleep(WORK_S)
    a.signal(signal.SIGCONT, "sigcont")
    await stale_shared_holder(run, a, hold, "SIGCONT")
    await c.call("end")
    await c.call("release")
    if late_reader is not None:
        reply = await asyncio.wait_for(late, 60)
        if run.expect(reply.get("ok"), "the queued reader got in after the writer"):
            await work_and_release(run, late_reader, "read")
    else:
        await b.call("end")
        await b.call("release")


@scenario("semaphore-sigstop")
async def semaphore_sigstop(run: Run, p: dict[str, Any]) -> None:
    """SIGSTOP of a permit holder past its ttl (semaphore of 2): a waiter gets its permit while
    the other holder goes on; SIGCONT: the stopped holder reads lost and may not work on."""
    await stop_a_shared_holder(run, p, permit(p))


@scenario("rwlock-sigstop")
async def rwlock_sigstop(run: Run, p: dict[str, Any]) -> None:
    """SIGSTOP of a reader past its ttl: a writer gets in once the other reader left and the
    stopped one's lease expired, a reader arriving meanwhile queues behind the writer; SIGCONT:
    the stopped reader reads lost and may not read on."""
    await stop_a_shared_holder(run, p, {"mode": "read"})


@scenario("rwlock-zk-session-loss")
async def rwlock_zk_session_loss(run: Run, p: dict[str, Any]) -> None:
    """The writer's ZooKeeper connections reset and refused (proxy `drop`) past the session
    timeout: its session expires, another writer gets in and writes, the stale writer's writes
    are refused (LOST with the lease, STALE_TOKEN with the bare token); then a reader."""
    ttl = p["ttl_ms"]
    life = lease_ttl_ms(run.backend, ttl)
    url = await run.proxied_url()
    a, b, c = [await run.worker(i, url) for i in range(3)]
    got = await acquire_retrying(run, a, ttl, 30, mode="write")
    if not run.expect(got.get("ok"), "the writer acquired"):
        return
    await a.call("write", mode="lease")
    hold = a.send("hold", ms=life + 60000, probe_ms=50, write_ms=500, stop_after_lost=5)
    await asyncio.sleep(0.3)
    run.fault("partition-drop", worker=a.name)
    for px in run.proxies:
        px.drop(a.pid)
    t_cut = time.monotonic()
    reply = await b.call(
        "acquire", ttl_ms=ttl, wait_ms=life + 30000, mode="write", timeout=life / 1000 + 60
    )
    run.expect(reply.get("ok"), "another writer got in once the session expired")
    await b.call("begin")
    w = await b.call("write", mode="lease")
    run.expect(w.get("accepted"), "its fenced write was accepted")
    await asyncio.sleep(max(0.0, life / 1000 + 1 - (time.monotonic() - t_cut)))
    for px in run.proxies:
        px.heal(a.pid)
    run.fault("heal", worker=a.name)
    await stale_holder_writes(run, a, hold, "the session loss")
    reading = c.send("acquire", ttl_ms=ttl, wait_ms=30000, mode="read")
    await b.call("end")
    await b.call("release")
    reply = await asyncio.wait_for(reading, 60)
    if run.expect(reply.get("ok"), "a reader got in after the writer released"):
        await work_and_release(run, c, "read")
