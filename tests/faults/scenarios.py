"""The fault suite's scenarios: one async function per name of scenarios.toml (which says what
runs against which backend, with which parameters)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

from runs import (
    REDLOCK_MAX_TTL_S,
    ZK_ENSEMBLE_SESSION_MS,
    Run,
    Worker,
    backend_servers,
    lease_ttl_ms,
    now_us,
    server_pid,
    server_port,
    servers,
)


def find_lock_record(run: Run, worker: Worker, kind: str, after: int = 0) -> list[dict[str, Any]]:
    return [
        r
        for r in run.records
        if r.get("rec") == kind and r.get("worker") == worker.name and r.get("t", 0) >= after
    ]


async def acquire_retrying(
    run: Run,
    w: Worker,
    ttl_ms: int,
    within_s: float,
    wait_ms: Optional[int] = None,
    **mode: Any,
) -> dict[str, Any]:
    """Acquire, retrying transient errors (UNAVAILABLE while a server restarts) until `within_s`.
    `mode`: the acquire's mode and permits (the mutex when none)."""
    deadline = time.monotonic() + within_s
    while True:
        left_ms = int((deadline - time.monotonic()) * 1000)
        wait = left_ms if wait_ms is None else min(wait_ms, left_ms)
        reply = await w.call(
            "acquire", ttl_ms=ttl_ms, wait_ms=max(wait, 0), timeout=within_s + 30, **mode
        )
        if (
            reply.get("ok")
            or time.monotonic() >= deadline
            or reply.get("code") not in ("UNAVAILABLE", "BACKEND", "TIMEOUT")
        ):
            return reply
        await asyncio.sleep(0.2)


# ----------------------------------------------------------------- scenarios

Scenario = Callable[[Run, dict[str, Any]], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str) -> Callable[[Scenario], Scenario]:
    def register(fn: Scenario) -> Scenario:
        SCENARIOS[name] = fn
        return fn

    return register


@scenario("contention")
async def contention(run: Run, p: dict[str, Any]) -> None:
    """Several clients in several languages take turns on one lock and write through one fence."""
    ws = [await run.worker(i) for i in range(p.get("clients", 3))]
    cmd = {"ttl_ms": p.get("ttl_ms", 10000), "writes": p.get("writes", 2)}
    if "duration_s" in p:
        cmd["duration_ms"] = int(p["duration_s"] * 1000)
    else:
        cmd["count"] = p.get("cycles", 5)
    replies = await asyncio.gather(
        *(w.call("cycle", timeout=p.get("duration_s", 60) + 120, **cmd) for w in ws)
    )
    run.expect(
        all(r.get("ok") and r.get("cycles", 0) > 0 for r in replies),
        "every client completed cycles",
    )


async def first_of(
    waiting: dict[Worker, "asyncio.Future[dict[str, Any]]"], timeout: float
) -> tuple[Worker, dict[str, Any]]:
    """The waiter whose acquire answered first, and its answer."""
    done, _ = await asyncio.wait(
        list(waiting.values()), timeout=timeout, return_when=asyncio.FIRST_COMPLETED
    )
    if not done:
        raise asyncio.TimeoutError("no waiter's acquire answered")
    fut = done.pop()
    worker = next(w for w, f in waiting.items() if f is fut)
    return worker, fut.result()


async def second_turn(
    run: Run, waiting: dict[Worker, "asyncio.Future[dict[str, Any]]"], first: Worker, timeout: float
) -> None:
    """After the first waiter released: the other one acquires, writes, releases."""
    for w, fut in waiting.items():
        if w is first:
            continue
        reply = await asyncio.wait_for(fut, timeout)
        if run.expect(reply.get("ok"), f"the other waiter ({w.name}) acquired after it"):
            wr = await w.call("write", mode="lease")
            run.expect(wr.get("accepted"), f"{w.name}'s fenced write was accepted")
            await w.call("release")


@scenario("kill9")
async def kill9(run: Run, p: dict[str, Any]) -> None:
    """kill -9 of a holder: the lock is free within its ttl (the session timeout on ZooKeeper) +
    margin; two waiters in the other two languages then take their turns."""
    ttl = p["ttl_ms"]
    life = lease_ttl_ms(run.backend, ttl)
    a, b, c = await run.worker(0), await run.worker(1), await run.worker(2)
    got = await acquire_retrying(run, a, ttl, 30)
    if not run.expect(got.get("ok"), "the holder acquired"):
        return
    await a.call("write", mode="lease")
    a.send("hold", ms=60000, probe_ms=50)
    waiting = {w: w.send("acquire", ttl_ms=ttl, wait_ms=life + 60000) for w in (b, c)}
    await asyncio.sleep(0.5)
    t_kill = now_us()
    a.signal(signal.SIGKILL, "kill")
    first, reply = await first_of(waiting, life / 1000 + 60)
    t_got = now_us()
    margin_ms = p.get("margin_ms", 5000)
    run.expect(reply.get("ok"), f"a waiter ({first.name}) acquired after the kill")
    run.expect(
        t_got - t_kill <= (life + margin_ms) * 1000,
        f"the lock was free within ttl + {margin_ms} ms of the kill ({(t_got - t_kill) // 1000} ms; ttl {life} ms)",
    )
    w = await first.call("write", mode="lease")
    run.expect(w.get("accepted"), "the new holder's fenced write was accepted")
    await first.call("release")
    await second_turn(run, waiting, first, 60)


async def stale_holder_writes(
    run: Run, a: Worker, hold: "asyncio.Future[dict[str, Any]]", what: str
) -> None:
    """After a fault that let another client take the lock: the stale holder's writes are rejected."""
    held = await asyncio.wait_for(hold, 120)
    run.expect(held.get("ok") and held.get("lost"), f"the stale holder reads lost after {what}")
    w1 = await a.call("write", mode="lease")
    run.expect(
        not w1.get("accepted") and w1.get("code") == "LOST",
        f"its fenced write with the lease is refused with LOST (got {w1.get('code')})",
    )
    w2 = await a.call("write", mode="token")
    run.expect(
        not w2.get("accepted") and w2.get("code") == "STALE_TOKEN",
        f"its fenced write with the bare token is refused by the fence with STALE_TOKEN (got {w2.get('code')})",
    )
    sig = [r for r in run.records if r.get("rec") == "lost_signal" and r["worker"] == a.name]
    run.expect(bool(sig), "its lost signal fired")
    rel = await a.call("release")
    run.expect(
        not rel.get("ok") and rel.get("code") == "LOST",
        f"its release reports LOST (got {rel.get('code')})",
    )


@scenario("sigstop")
async def sigstop(run: Run, p: dict[str, Any]) -> None:
    """SIGSTOP of a holder past its ttl, another acquires and writes, SIGCONT: the stale holder's
    fenced writes are rejected and its lease reports lost. Two waiters in the other languages."""
    ttl = p["ttl_ms"]
    life = lease_ttl_ms(run.backend, ttl)
    a, b, c = await run.worker(0), await run.worker(1), await run.worker(2)
    got = await acquire_retrying(run, a, ttl, 30)
    if not run.expect(got.get("ok"), "the holder acquired"):
        return
    await a.call("write", mode="lease")
    hold = a.send("hold", ms=life + 60000, probe_ms=50, stop_after_lost=5)
    await asyncio.sleep(0.3)
    a.signal(signal.SIGSTOP, "sigstop")
    waiting = {w: w.send("acquire", ttl_ms=ttl, wait_ms=life + 60000) for w in (b, c)}
    first, reply = await first_of(waiting, life / 1000 + 60)
    run.expect(
        reply.get("ok"), f"another client ({first.name}) acquired while the holder was stopped"
    )
    w = await first.call("write", mode="lease")
    run.expect(w.get("accepted"), "the new holder's fenced write was accepted")
    a.signal(signal.SIGCONT, "sigcont")
    await stale_holder_writes(run, a, hold, "SIGCONT")
    await first.call("release")
    await second_turn(run, waiting, first, 60)


@scenario("partition")
async def partition(run: Run, p: dict[str, Any]) -> None:
    """A network partition between the holder and its server longer than the ttl, then healed."""
    ttl = p["ttl_ms"]
    life = lease_ttl_ms(run.backend, ttl)
    url = await run.proxied_url()
    a, b = await run.worker(0, url), await run.worker(1, url)
    got = await acquire_retrying(run, a, ttl, 30)
    if not run.expect(got.get("ok"), "the holder acquired"):
        return
    await a.call("write", mode="lease")
    hold = a.send("hold", ms=life + 60000, probe_ms=50, write_ms=500, stop_after_lost=5)
    await asyncio.sleep(0.3)
    mode = p.get("mode", "pause")
    run.fault(f"partition-{mode}", worker=a.name)
    for px in run.proxies:
        if mode == "delay":
            px.delay(a.pid, p["delay_ms"] / 1000)
        else:
            getattr(px, mode)(a.pid)
    t_cut = time.monotonic()
    reply = await b.call("acquire", ttl_ms=ttl, wait_ms=life + 30000, timeout=life / 1000 + 60)
    run.expect(reply.get("ok"), "another client acquired during the partition")
    w = await b.call("write", mode="lease")
    run.expect(w.get("accepted"), "the new holder's fenced write was accepted")
    await asyncio.sleep(max(0.0, life / 1000 + 1 - (time.monotonic() - t_cut)))
    for px in run.proxies:
        px.heal(a.pid)
    run.fault("heal", worker=a.name)
    await stale_holder_writes(run, a, hold, "the partition")
    await b.call("release")


async def restart_servers(run: Run, names: list[str]) -> None:
    run.fault("restart", servers=names)
    await asyncio.to_thread(servers, "restart", *names)
    run.fault("restarted", servers=names)


async def kill_servers(run: Run, names: list[str]) -> None:
    run.fault("server-kill", servers=names)
    for n in names:
        pid = server_pid(n)
        if pid:
            os.kill(pid, signal.SIGKILL)
    for n in names:
        pid = server_pid(n)
        while pid and Path(f"/proc/{pid}").exists() and _state(pid) != "Z":
            await asyncio.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


async def start_servers(run: Run, names: list[str]) -> None:
    await asyncio.to_thread(servers, "start", *names)
    run.fault("server-start", servers=names)


@scenario("server-restart")
async def server_restart(run: Run, p: dict[str, Any]) -> None:
    """The backend's server restarts while a lease is held (Redis without persistence: it forgets
    the lock, so the fence is what keeps the stale holder out; SQL servers keep their rows)."""
    ttl = p["ttl_ms"]
    run.forgetful = run.backend == "redis"
    a, b = await run.worker(0), await run.worker(1)
    got = await acquire_retrying(run, a, ttl, 30)
    if not run.expect(got.get("ok"), "the holder acquired"):
        return
    await a.call("write", mode="lease")
    hold = a.send("hold", ms=ttl * 3, probe_ms=50, write_ms=300, stop_after_lost=5)
    await asyncio.sleep(0.5)
    await restart_servers(run, backend_servers(run.backend))
    if run.backend == "redis":
        reply = await acquire_retrying(run, b, ttl, 30, wait_ms=2000)
        run.expect(reply.get("ok"), "after the restart another client acquires the forgotten lock")
        w = await b.call("write", mode="lease")
        run.expect(w.get("accepted"), "the new holder's fenced write was accepted")
        held = await asyncio.wait_for(hold, 120)
        run.expect(held.get("lost"), "the old holder learns it lost the lock (renewal: not ours)")
        w2 = await a.call("write", mode="token")
        run.expect(
            w2.get("code") == "STALE_TOKEN",
            f"the old holder's token is refused by the fence (got {w2.get('code')})",
        )
        await a.call("release")
    else:
        # The restart may outlast the holder's deadline or not: either way is safe, the checker
        # holds it to what it read; then the lock must be usable again.
        await asyncio.wait_for(hold, 120)
        rel = await a.call("release")
        run.expect(
            rel.get("ok") or rel.get("code") in ("LOST", "UNAVAILABLE"),
            f"the holder releases or reports loss ({rel.get('code')})",
        )
        reply = await acquire_retrying(run, b, ttl, 60)
        run.expect(reply.get("ok"), "after the restart another client acquires")
        w = await b.call("write", mode="lease")
        run.expect(w.get("accepted"), "its fenced write was accepted")
    await b.call("release")


@scenario("redlock-2-down")
async def redlock_two_down(run: Run, p: dict[str, Any]) -> None:
    """2 of 5 Redlock masters killed: safe and live (3 remain a majority)."""
    ttl = p["ttl_ms"]
    a, b = await run.worker(0), await run.worker(1)
    got = await acquire_retrying(run, a, ttl, 30)
    if not run.expect(got.get("ok"), "the holder acquired"):
        return
    down = ["redlock-4", "redlock-5"]
    await kill_servers(run, down)
    held = await a.call("hold", ms=ttl + 2000, probe_ms=50, write_ms=300, timeout=60)
    run.expect(
        held.get("ok") and not held.get("lost"),
        "the holder keeps its lease on 3 of 5 (renewals reach a majority)",
    )
    await a.call("release")
    reply = await b.call("acquire", ttl_ms=ttl, wait_ms=10000, timeout=60)
    run.expect(reply.get("ok"), "another client acquires with 3 of 5 up (live)")
    w = await b.call("write", mode="lease")
    run.expect(w.get("accepted"), "its fenced write was accepted")
    await b.call("release")
    await start_servers(run, down)


@scenario("redlock-3-down")
async def redlock_three_down(run: Run, p: dict[str, Any]) -> None:
    """3 of 5 Redlock masters killed: safe (the holder is lost by its deadline, nobody else gets
    the lock) and not live; restarted empty, the masters abstain for max_ttl + 2 x max_skew."""
    ttl = p["ttl_ms"]
    a, b = await run.worker(0), await run.worker(1)
    got = await acquire_retrying(run, a, ttl, 30)
    if not run.expect(got.get("ok"), "the holder acquired"):
        return
    hold = a.send("hold", ms=ttl + 20000, probe_ms=50, write_ms=300, stop_after_lost=5)
    down = ["redlock-3", "redlock-4", "redlock-5"]
    t_kill = now_us()
    await kill_servers(run, down)
    held = await asyncio.wait_for(hold, 60)
    lost_probe = next((r for r in find_lock_record(run, a, "probe") if r["lost"]), None)
    run.expect(
        held.get("lost")
        and lost_probe is not None
        and lost_probe["t"] - t_kill <= (ttl + 3000) * 1000,
        "the holder reads lost within its ttl + 3 s of losing the majority",
    )
    tries = await b.call("acquire", ttl_ms=ttl, wait_ms=ttl + 1000, timeout=60)
    run.expect(
        not tries.get("ok"), f"nobody acquires with 2 of 5 up (not live; got {tries.get('code')})"
    )
    await a.call("release")
    await start_servers(run, down)
    t_up = now_us()
    reply = await acquire_retrying(run, b, ttl, 60)
    t_got = now_us()
    run.expect(reply.get("ok"), "after the restart another client acquires")
    window = (REDLOCK_MAX_TTL_S * 1000 + 200) * 1000
    run.expect(
        t_got - t_up >= window - 1_500_000,
        f"not before the restarted masters stopped abstaining ({(t_got - t_up) // 1000} ms after their start)",
    )
    w = await b.call("write", mode="lease")
    run.expect(w.get("accepted"), "its fenced write was accepted")
    await b.call("release")


@scenario("redlock-restart-empty")
async def redlock_restart_empty(run: Run, p: dict[str, Any]) -> None:
    """A Redlock master restarted empty abstains: with it and 2 others up, nobody acquires until
    its uptime passes max_ttl + 2 x max_skew; tokens keep increasing afterwards."""
    ttl = p["ttl_ms"]
    a, b = await run.worker(0), await run.worker(1)
    got = await acquire_retrying(run, a, ttl, 30)
    if not run.expect(got.get("ok"), "the holder acquired"):
        return
    await a.call("write", mode="lease")
    await a.call("release")
    await restart_servers(run, ["redlock-1"])
    t_up = now_us()
    await kill_servers(run, ["redlock-4", "redlock-5"])
    reply = await acquire_retrying(run, b, ttl, 60)
    t_got = now_us()
    run.expect(reply.get("ok"), "a client acquires once the restarted master votes again")
    window = (REDLOCK_MAX_TTL_S * 1000 + 200) * 1000
    run.expect(
        t_got - t_up >= window - 1_500_000,
        f"not before its abstention ended ({(t_got - t_up) // 1000} ms after its restart)",
    )
    w = await b.call("write", mode="lease")
    run.expect(w.get("accepted"), "its fenced write was accepted")
    await b.call("release")
    await start_servers(run, ["redlock-4", "redlock-5"])


@scenario("slow-link")
async def slow_link(run: Run, p: dict[str, Any]) -> None:
    """Every packet between the holder and its server delayed by more than the ttl: its renewals
    answer too late, it is lost at its deadline, another client takes over, its writes are refused."""
    await partition(run, dict(p, mode="delay"))


@scenario("zk-session-loss")
async def zk_session_loss(run: Run, p: dict[str, Any]) -> None:
    """The holder's ZooKeeper connections are reset and refused longer than the session timeout:
    the server expires its session, another client acquires, and the old holder is fenced out."""
    run_params = dict(p, mode="drop")
    await partition(run, run_params)


@scenario("zk-leader-loss")
async def zk_leader_loss(run: Run, p: dict[str, Any]) -> None:
    """kill -9 of the ensemble's leader while a lease is held: safe, and the lock is usable again
    after the election."""
    a, b = await run.worker(0), await run.worker(1)
    got = await acquire_retrying(run, a, 10000, 30)
    if not run.expect(got.get("ok"), "the holder acquired"):
        return
    leader = None
    for i in range(1, 4):
        out = subprocess.run(
            [
                "bash",
                "-c",
                f"exec 3<>/dev/tcp/127.0.0.1/{server_port(f'zk-ensemble-{i}')}; printf srvr >&3; cat <&3",
            ],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout
        if "Mode: leader" in out:
            leader = f"zk-ensemble-{i}"
    if leader is None:
        run.expect(False, "found the ensemble's leader")
        return
    run.fault("leader", server=leader)
    hold = a.send("hold", ms=ZK_ENSEMBLE_SESSION_MS + 4000, probe_ms=50, write_ms=300)
    await kill_servers(run, [leader])
    t_kill = now_us()
    held = await asyncio.wait_for(hold, 60)
    rel = await a.call("release")
    run.expect(
        held.get("ok"),
        f"the holder kept running (lost: {held.get('lost')}, release: {rel.get('code') or 'ok'})",
    )
    reply = await acquire_retrying(run, b, 10000, 60)
    t_got = now_us()
    run.expect(
        reply.get("ok"),
        f"another client acquires after the election ({(t_got - t_kill) // 1000} ms after the kill)",
    )
    w = await b.call("write", mode="lease")
    run.expect(w.get("accepted"), "its fenced write was accepted")
    await b.call("release")
    await start_servers(run, [leader])


SCENARIOS["soak"] = contention


def take_with_others(run: Run) -> None:
    """Makes every worker's exclusive lease a multi-name lock over the lock and two more names
    (docs/design.md §1.9): the lock is the part they fence with, so the checker judges the
    multi-lock by it exactly as it judges a mutex."""
    run.also = [f"{run.lock}/b", f"{run.lock}/c"]


@scenario("multi-contention")
async def multi_contention(run: Run, p: dict[str, Any]) -> None:
    """As contention, each client taking three names as one lock."""
    take_with_others(run)
    await contention(run, p)


@scenario("multi-sigstop")
async def multi_sigstop(run: Run, p: dict[str, Any]) -> None:
    """As sigstop, each client taking three names as one lock: the stopped holder's whole is
    lost past its deadline and its part's writes are refused."""
    take_with_others(run)
    await sigstop(run, p)
