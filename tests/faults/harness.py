"""The fault-injection suite's orchestrator (stdlib only).

    python3 tests/faults/harness.py short            each scenario x backend once, rotating languages
    python3 tests/faults/harness.py soak [--minutes M] [--clients N] [--backends a,b]
    python3 tests/faults/harness.py one SCENARIO BACKEND [--langs rust,python,node]
    python3 tests/faults/harness.py broken           the broken build must make the checker fail
    python3 tests/faults/harness.py report           regenerate tests/FAULTS.md from results/
    python3 tests/faults/harness.py check FILE...    check recorded histories again

It runs its own servers (tests/servers.sh with FENCELOCK_SERVERS_DIR and every port moved by
+20000), never the shared ones, and workers in Rust, Python and Node that speak the protocol of
README.md. Every run's history goes to the state folder; its summary (counts, violations, the
command that reproduces it) is appended to a results file, from which `report` writes FAULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checker  # noqa: E402
from proxy import Proxy  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
STATE = Path(os.environ.get("FENCELOCK_FAULTS_DIR", "/tmp/fencelock-faults"))
SERVERS_DIR = STATE / "servers"
LANGS = ["rust", "python", "node"]

# Our own server set: every port of design section 7 plus 20000, state under STATE/servers.
PORTS = {
    "FENCELOCK_TEST_REDIS_PORT": 26379,
    "FENCELOCK_TEST_REDIS_TLS_PORT": 26380,
    "FENCELOCK_TEST_REDIS_ACL_PORT": 26381,
    "FENCELOCK_TEST_REDIS_REPLICA_PORT": 26382,
    "FENCELOCK_TEST_REDLOCK_PORT_BASE": 27000,
    "FENCELOCK_TEST_REDIS_CLUSTER_PORT_BASE": 27100,
    "FENCELOCK_TEST_ZK_PORT": 22181,
    "FENCELOCK_TEST_ZK_ENSEMBLE_PORT_BASE": 22280,
    "FENCELOCK_TEST_ZK_ENSEMBLE_PEER_PORT_BASE": 22880,
    "FENCELOCK_TEST_ZK_ENSEMBLE_ELECTION_PORT_BASE": 23880,
    "FENCELOCK_TEST_POSTGRES_PORT": 25432,
    "FENCELOCK_TEST_MARIADB_PORT": 23306,
}
# FENCELOCK_FAULTS_PORT_OFFSET moves them all (a soak beside a short run needs a set of its own).
_OFFSET = int(os.environ.get("FENCELOCK_FAULTS_PORT_OFFSET", "20000")) - 20000
PORTS = {k: int(os.environ.get("FENCELOCK_FAULTS_" + k.removeprefix("FENCELOCK_TEST_"), v + _OFFSET)) for k, v in PORTS.items()}
REDLOCK_MAX_TTL_S = 5
ZK_SESSION_MS = 3000
ZK_ENSEMBLE_SESSION_MS = 8000
SERVER_GROUPS = {
    "redis": ["redis"],
    "redlock": ["redlock"],
    "zookeeper": ["zookeeper"],
    "zk-ensemble": ["zk-ensemble"],
    "postgres": ["postgres"],
    "mariadb": ["mariadb"],
    "sqlite": [],
}


def now_us() -> int:
    return time.time_ns() // 1000


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env["FENCELOCK_SERVERS_DIR"] = str(SERVERS_DIR)
    env.update({k: str(v) for k, v in PORTS.items()})
    return env


def servers(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / "tests/servers.sh"), *args], env=server_env(), text=True,
                          capture_output=True, check=check)


def server_pid(name: str) -> Optional[int]:
    f = SERVERS_DIR / name / ("data/postmaster.pid" if name == "postgres" else "pid")
    try:
        return int(f.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def server_port(name: str) -> int:
    if name == "redis":
        return PORTS["FENCELOCK_TEST_REDIS_PORT"]
    if name.startswith("redlock-"):
        return PORTS["FENCELOCK_TEST_REDLOCK_PORT_BASE"] + int(name.rsplit("-", 1)[1])
    if name == "zookeeper":
        return PORTS["FENCELOCK_TEST_ZK_PORT"]
    if name.startswith("zk-ensemble-"):
        return PORTS["FENCELOCK_TEST_ZK_ENSEMBLE_PORT_BASE"] + int(name.rsplit("-", 1)[1])
    if name == "postgres":
        return PORTS["FENCELOCK_TEST_POSTGRES_PORT"]
    if name == "mariadb":
        return PORTS["FENCELOCK_TEST_MARIADB_PORT"]
    raise KeyError(name)


def lock_url(backend: str, run_dir: Path, ports: Optional[dict[str, int]] = None) -> str:
    """The backend's URL; `ports` maps server names to proxy ports that stand in for them."""
    p = lambda name: (ports or {}).get(name, server_port(name))  # noqa: E731
    h = "127.0.0.1"
    if backend == "redis":
        return f"redis://{h}:{p('redis')}"
    if backend == "redlock":
        hosts = ",".join(f"{h}:{p(f'redlock-{i}')}" for i in range(1, 6))
        return f"redlock://{hosts}?max_ttl={REDLOCK_MAX_TTL_S}s&max_skew=100ms"
    if backend == "zookeeper":
        return f"zk://{h}:{p('zookeeper')}?session_timeout_ms={ZK_SESSION_MS}"
    if backend == "zk-ensemble":
        hosts = ",".join(f"{h}:{p(f'zk-ensemble-{i}')}" for i in range(1, 4))
        return f"zk://{hosts}?session_timeout_ms={ZK_ENSEMBLE_SESSION_MS}"
    if backend == "postgres":
        return f"postgres://fencelock:fencelock-test@{h}:{p('postgres')}/fencelock_test"
    if backend == "mariadb":
        return f"mariadb://fencelock:fencelock-test@{h}:{p('mariadb')}/fencelock_test"
    if backend == "sqlite":
        return f"sqlite://{run_dir}/locks.db"
    raise KeyError(backend)


def backend_servers(backend: str) -> list[str]:
    return {
        "redis": ["redis"],
        "redlock": [f"redlock-{i}" for i in range(1, 6)],
        "zookeeper": ["zookeeper"],
        "zk-ensemble": [f"zk-ensemble-{i}" for i in range(1, 4)],
        "postgres": ["postgres"],
        "mariadb": ["mariadb"],
        "sqlite": [],
    }[backend]


def lease_ttl_ms(backend: str, ttl_ms: int) -> int:
    """How long a lease lives without renewal: the ttl, or the ZooKeeper session timeout."""
    if backend == "zookeeper":
        return ZK_SESSION_MS
    if backend == "zk-ensemble":
        return ZK_ENSEMBLE_SESSION_MS
    return ttl_ms


# ------------------------------------------------------------------ workers


class WorkerDied(Exception):
    pass


class Worker:
    """One worker process and its JSON-lines conversation."""

    def __init__(self, run: "Run", name: str, lang: str) -> None:
        self.run, self.name, self.lang = run, name, lang
        self.proc: Optional[asyncio.subprocess.Process] = None
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.next_id = 0
        self.pid = 0
        self.reader: Optional[asyncio.Task[None]] = None

    def command(self) -> list[str]:
        if self.lang == "rust":
            exe = self.run.rust_worker
            return [str(exe)]
        if self.lang == "python":
            return [str(ROOT / "target/py-venv/bin/python"), str(HERE / "worker.py")]
        if self.lang == "node":
            return ["node", str(HERE / "worker.mjs")]
        if self.lang == "jvm":  # added with the JVM binding: see README.md
            return [str(ROOT / "bindings/jvm/faults-worker/run.sh")]
        raise KeyError(self.lang)

    async def start(self, lock_url: str) -> None:
        env = dict(os.environ)
        if self.run.broken:
            env["FENCELOCK_FAULT_INJECTION_DISABLE_FENCING"] = "1"
        stderr = open(self.run.dir / f"{self.name}.stderr", "ab")
        self.proc = await asyncio.create_subprocess_exec(
            *self.command(), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr, env=env,
            limit=1 << 24)
        stderr.close()
        self.pid = self.proc.pid
        self.reader = asyncio.create_task(self._read())
        await self.call("init", worker=self.name, lock_url=lock_url, fence_url=self.run.fence_url,
                        resource=self.run.resource, lock=self.run.lock, op_timeout_ms=3000, timeout=60)

    async def _read(self) -> None:
        assert self.proc and self.proc.stdout
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                break
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if "rec" in obj:
                self.run.record(obj)
            elif "reply" in obj:
                fut = self.pending.pop(obj["reply"], None)
                if fut is not None and not fut.done():
                    fut.set_result(obj)
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(WorkerDied(f"{self.name} ({self.lang}) exited"))
        self.pending.clear()

    def send(self, op: str, **fields: Any) -> asyncio.Future[dict[str, Any]]:
        assert self.proc and self.proc.stdin
        self.next_id += 1
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        if self.proc.returncode is not None or self.reader is None or self.reader.done():
            fut.set_exception(WorkerDied(f"{self.name} ({self.lang}) is not running"))
            return fut
        self.pending[self.next_id] = fut
        # A command whose answer nobody awaits (a hold cut short by kill -9) is not an error.
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        self.proc.stdin.write((json.dumps({"id": self.next_id, "op": op, **fields}) + "\n").encode())
        return fut

    async def call(self, op: str, timeout: float = 120, **fields: Any) -> dict[str, Any]:
        reply = await asyncio.wait_for(self.send(op, **fields), timeout)
        if not reply.get("ok") and op == "init":
            raise RuntimeError(f"{self.name} ({self.lang}) init failed: {reply.get('code')} {reply.get('message')}")
        return reply

    def signal(self, sig: int, kind: str) -> None:
        self.run.fault(kind, worker=self.name)
        os.kill(self.pid, sig)

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        try:
            os.kill(self.pid, signal.SIGCONT)
            await asyncio.wait_for(self.send("exit"), 10)
        except (WorkerDied, asyncio.TimeoutError, ProcessLookupError, ConnectionError):
            pass
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except asyncio.TimeoutError:
            self.proc.kill()
            await self.proc.wait()


# ---------------------------------------------------------------------- runs


@dataclass
class Run:
    scenario: str
    backend: str
    langs: list[str]
    profile: str
    index: int
    broken: bool = False
    rust_worker: Path = ROOT / "target/debug/fencelock-faults-worker"
    records: list[dict[str, Any]] = field(default_factory=list)
    expectations: list[dict[str, Any]] = field(default_factory=list)
    workers: list[Worker] = field(default_factory=list)
    proxies: list[Proxy] = field(default_factory=list)
    forgetful: bool = False

    def __post_init__(self) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        self.id = f"{self.scenario}-{self.backend}-{stamp}-{self.index}"
        self.dir = STATE / "runs" / self.id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fence_db = self.dir / "fence.db"
        self.fence_url = f"sqlite://{self.fence_db}"
        self.resource = f"faults/{self.id}"
        self.lock = f"faults/{self.id}"
        self.history = open(self.dir / "history.jsonl", "w")
        db = sqlite3.connect(self.fence_db)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(
            "CREATE TABLE fault_writes (seq INTEGER PRIMARY KEY AUTOINCREMENT, write_id TEXT NOT NULL UNIQUE,"
            " cs TEXT NOT NULL, token INTEGER NOT NULL, worker TEXT NOT NULL, lang TEXT NOT NULL, mode TEXT NOT NULL,"
            " t_sent INTEGER NOT NULL,"
            " t_commit INTEGER DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)))")
        db.commit()
        db.close()

    def record(self, obj: dict[str, Any]) -> None:
        self.records.append(obj)
        self.history.write(json.dumps(obj) + "\n")
        self.history.flush()

    def fault(self, kind: str, **fields: Any) -> None:
        self.record({"rec": "fault", "kind": kind, "t": now_us(), **fields})

    def expect(self, ok: Any, what: str) -> bool:
        self.expectations.append({"ok": bool(ok), "what": what})
        self.record({"rec": "expect", "ok": bool(ok), "what": what, "t": now_us()})
        return ok

    def worker_pids(self) -> list[int]:
        return [w.pid for w in self.workers if w.pid]

    async def worker(self, role: int, url: Optional[str] = None) -> Worker:
        lang = self.langs[role % len(self.langs)]
        w = Worker(self, f"{chr(ord('A') + role)}-{lang}", lang)
        self.workers.append(w)
        await w.start(url or lock_url(self.backend, self.dir))
        return w

    async def proxied_url(self) -> str:
        """Starts one proxy per server of the backend; returns the URL through them."""
        ports = {}
        for name in backend_servers(self.backend):
            px = await Proxy(server_port(name), self.worker_pids).start()
            self.proxies.append(px)
            ports[name] = px.port
        return lock_url(self.backend, self.dir, ports)

    def log_rows(self) -> list[dict[str, Any]]:
        db = sqlite3.connect(self.fence_db)
        db.row_factory = sqlite3.Row
        rows = [dict(r) for r in db.execute("SELECT * FROM fault_writes ORDER BY seq")]
        db.close()
        return rows

    async def close(self) -> None:
        await asyncio.gather(*(w.stop() for w in self.workers), return_exceptions=True)
        for px in self.proxies:
            await px.close()
        self.history.close()


def find_lock_record(run: Run, worker: Worker, kind: str, after: int = 0) -> list[dict[str, Any]]:
    return [r for r in run.records if r.get("rec") == kind and r.get("worker") == worker.name and r.get("t", 0) >= after]


async def acquire_retrying(run: Run, w: Worker, ttl_ms: int, within_s: float, wait_ms: Optional[int] = None) -> dict[str, Any]:
    """Acquire, retrying transient errors (UNAVAILABLE while a server restarts) until `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        left_ms = int((deadline - time.monotonic()) * 1000)
        wait = left_ms if wait_ms is None else min(wait_ms, left_ms)
        reply = await w.call("acquire", ttl_ms=ttl_ms, wait_ms=max(wait, 0), timeout=within_s + 30)
        if reply.get("ok") or time.monotonic() >= deadline or reply.get("code") not in ("UNAVAILABLE", "BACKEND", "TIMEOUT"):
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
    replies = await asyncio.gather(*(w.call("cycle", timeout=p.get("duration_s", 60) + 120, **cmd) for w in ws))
    run.expect(all(r.get("ok") and r.get("cycles", 0) > 0 for r in replies), "every client completed cycles")


async def first_of(waiting: dict[Worker, "asyncio.Future[dict[str, Any]]"], timeout: float) -> tuple[Worker, dict[str, Any]]:
    """The waiter whose acquire answered first, and its answer."""
    done, _ = await asyncio.wait(list(waiting.values()), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    if not done:
        raise asyncio.TimeoutError("no waiter's acquire answered")
    fut = done.pop()
    worker = next(w for w, f in waiting.items() if f is fut)
    return worker, fut.result()


async def second_turn(run: Run, waiting: dict[Worker, "asyncio.Future[dict[str, Any]]"], first: Worker, timeout: float) -> None:
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
    run.expect(t_got - t_kill <= (life + margin_ms) * 1000,
               f"the lock was free within ttl + {margin_ms} ms of the kill ({(t_got - t_kill) // 1000} ms; ttl {life} ms)")
    w = await first.call("write", mode="lease")
    run.expect(w.get("accepted"), "the new holder's fenced write was accepted")
    await first.call("release")
    await second_turn(run, waiting, first, 60)


async def stale_holder_writes(run: Run, a: Worker, hold: "asyncio.Future[dict[str, Any]]", what: str) -> None:
    """After a fault that let another client take the lock: the stale holder's writes are rejected."""
    held = await asyncio.wait_for(hold, 120)
    run.expect(held.get("ok") and held.get("lost"), f"the stale holder reads lost after {what}")
    w1 = await a.call("write", mode="lease")
    run.expect(not w1.get("accepted") and w1.get("code") == "LOST",
               f"its fenced write with the lease is refused with LOST (got {w1.get('code')})")
    w2 = await a.call("write", mode="token")
    run.expect(not w2.get("accepted") and w2.get("code") == "STALE_TOKEN",
               f"its fenced write with the bare token is refused by the fence with STALE_TOKEN (got {w2.get('code')})")
    sig = [r for r in run.records if r.get("rec") == "lost_signal" and r["worker"] == a.name]
    run.expect(bool(sig), "its lost signal fired")
    rel = await a.call("release")
    run.expect(not rel.get("ok") and rel.get("code") == "LOST", f"its release reports LOST (got {rel.get('code')})")


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
    run.expect(reply.get("ok"), f"another client ({first.name}) acquired while the holder was stopped")
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
        run.expect(w2.get("code") == "STALE_TOKEN", f"the old holder's token is refused by the fence (got {w2.get('code')})")
        await a.call("release")
    else:
        # The restart may outlast the holder's deadline or not: either way is safe, the checker
        # holds it to what it read; then the lock must be usable again.
        await asyncio.wait_for(hold, 120)
        rel = await a.call("release")
        run.expect(rel.get("ok") or rel.get("code") in ("LOST", "UNAVAILABLE"), f"the holder releases or reports loss ({rel.get('code')})")
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
    run.expect(held.get("ok") and not held.get("lost"), "the holder keeps its lease on 3 of 5 (renewals reach a majority)")
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
    run.expect(held.get("lost") and lost_probe is not None and lost_probe["t"] - t_kill <= (ttl + 3000) * 1000,
               "the holder reads lost within its ttl + 3 s of losing the majority")
    tries = await b.call("acquire", ttl_ms=ttl, wait_ms=ttl + 1000, timeout=60)
    run.expect(not tries.get("ok"), f"nobody acquires with 2 of 5 up (not live; got {tries.get('code')})")
    await a.call("release")
    await start_servers(run, down)
    t_up = now_us()
    reply = await acquire_retrying(run, b, ttl, 60)
    t_got = now_us()
    run.expect(reply.get("ok"), "after the restart another client acquires")
    window = (REDLOCK_MAX_TTL_S * 1000 + 200) * 1000
    run.expect(t_got - t_up >= window - 1_500_000,
               f"not before the restarted masters stopped abstaining ({(t_got - t_up) // 1000} ms after their start)")
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
    run.expect(t_got - t_up >= window - 1_500_000,
               f"not before its abstention ended ({(t_got - t_up) // 1000} ms after its restart)")
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
        out = subprocess.run(["bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{server_port(f'zk-ensemble-{i}')}; printf srvr >&3; cat <&3"],
                             capture_output=True, text=True, timeout=5).stdout
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
    run.expect(held.get("ok"), f"the holder kept running (lost: {held.get('lost')}, release: {rel.get('code') or 'ok'})")
    reply = await acquire_retrying(run, b, 10000, 60)
    t_got = now_us()
    run.expect(reply.get("ok"), f"another client acquires after the election ({(t_got - t_kill) // 1000} ms after the kill)")
    w = await b.call("write", mode="lease")
    run.expect(w.get("accepted"), "its fenced write was accepted")
    await b.call("release")
    await start_servers(run, [leader])


# ---------------------------------------------------------------- execution


def load_plan() -> dict[str, Any]:
    with open(HERE / "scenarios.toml", "rb") as f:
        return tomllib.load(f)


async def run_one(name: str, backend: str, langs: list[str], profile: str, index: int, params: dict[str, Any],
                  broken: bool = False, rust_worker: Optional[Path] = None) -> dict[str, Any]:
    run = Run(name, backend, langs, profile, index, broken=broken)
    if rust_worker is not None:
        run.rust_worker = rust_worker
    t0 = time.monotonic()
    error = None
    try:
        await asyncio.wait_for(SCENARIOS[name](run, params), params.get("timeout_s", 240))
    except Exception as e:  # the run failed to complete: that is a failure, recorded as such
        error = f"{type(e).__name__}: {e}"
        run.expect(False, f"the scenario ran to the end ({error})")
    finally:
        await run.close()
    rows = run.log_rows()
    # The fence's log goes into the history too, so one file is all `harness.py check` needs.
    with open(run.dir / "history.jsonl", "a") as f:
        f.write(json.dumps({"rec": "meta", "run": run.id, "scenario": name, "backend": backend,
                            "forgetful": run.forgetful, "broken_build": broken}) + "\n")
        for row in rows:
            f.write(json.dumps({"rec": "accepted_write", **row}) + "\n")
    verdict = checker.check(run.records, rows, forgetful=run.forgetful)
    failed_expectations = [e["what"] for e in run.expectations if not e["ok"]]
    summary = {
        "run": run.id,
        "profile": profile,
        "scenario": name,
        "backend": backend,
        "langs": "+".join(f"{w.name}" for w in run.workers) or "+".join(langs),
        "broken_build": broken,
        "seconds": round(time.monotonic() - t0, 1),
        "sections": verdict.sections,
        "writes_accepted": verdict.writes_accepted,
        "writes_rejected": verdict.writes_rejected,
        "probes": verdict.probes,
        "violations": verdict.violations,
        "expectations": len(run.expectations),
        "failed_expectations": failed_expectations,
        "history": str(run.dir / "history.jsonl"),
        "command": f"tests/faults/run.sh one {name} {backend} --langs {','.join(langs)}",
        "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    (run.dir / "summary.json").write_text(json.dumps(summary, indent=1))
    status = "ok" if not verdict.violations and not failed_expectations else "FAIL"
    print(f"[{status}] {name:22} {backend:12} {summary['langs']:28} {summary['seconds']:6.1f}s "
          f"cs={verdict.sections} acc={verdict.writes_accepted} rej={verdict.writes_rejected} "
          f"violations={len(verdict.violations)} failed-expectations={len(failed_expectations)}", flush=True)
    for v in verdict.violations[:10]:
        print(f"       violation: {v}", flush=True)
    for what in failed_expectations:
        print(f"       expectation failed: {what}", flush=True)
    return summary


def start_backends(backends: list[str]) -> None:
    groups = sorted({g for b in backends for g in SERVER_GROUPS[b]})
    if groups:
        print(f"faults: starting own servers under {SERVERS_DIR}: {' '.join(groups)}", flush=True)
        r = servers("start", *groups, check=False)
        if r.returncode != 0:
            sys.stderr.write(r.stdout + r.stderr)
            raise SystemExit("faults: could not start the servers")


BUNDLE: Optional[Path] = None


def append_results(path: Path, summaries: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for s in summaries:
            f.write(json.dumps(s) + "\n")
    if BUNDLE is not None:
        # The histories themselves, so `harness.py check BUNDLE` can check them again anywhere.
        import gzip
        with gzip.open(BUNDLE, "at") as z:
            for s in summaries:
                for line in open(s["history"]):
                    obj = json.loads(line)
                    obj["_run"] = s["run"]
                    z.write(json.dumps(obj) + "\n")


def plan_runs(plan: dict[str, Any], only: Optional[set[str]] = None) -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for name, spec in plan["scenario"].items():
        for backend in spec["backends"]:
            if only and backend not in only:
                continue
            params = dict(spec.get("params", {}))
            params.update(spec.get("backend_params", {}).get(backend, {}))
            out.append((name, backend, params))
    return out


async def main_short(args: argparse.Namespace) -> int:
    plan = load_plan()
    runs = plan_runs(plan, set(args.backends.split(",")) if args.backends else None)
    if args.scenarios:
        runs = [r for r in runs if r[0] in set(args.scenarios.split(","))]
    start_backends(sorted({b for _, b, _ in runs}))
    summaries = []
    # Unless told, the rotation shifts by one every day, so CI puts every language in every role.
    rotate = args.rotate if args.rotate is not None else int(time.time() // 86400) % len(LANGS)
    for i, (name, backend, params) in enumerate(runs):
        k = i + rotate
        langs = [LANGS[(k + j) % len(LANGS)] for j in range(len(LANGS))]
        summaries.append(await run_one(name, backend, langs, "short", i, params))
    append_results(Path(args.results), summaries)
    bad = [s for s in summaries if s["violations"] or s["failed_expectations"]]
    print(f"faults: {len(summaries)} runs, {sum(s['sections'] for s in summaries)} critical sections, "
          f"{sum(len(s['violations']) for s in summaries)} violations, {len(bad)} failed runs", flush=True)
    return 1 if bad else 0


async def main_one(args: argparse.Namespace) -> int:
    plan = load_plan()
    spec = plan["scenario"][args.scenario]
    params = dict(spec.get("params", {}))
    params.update(spec.get("backend_params", {}).get(args.backend, {}))
    start_backends([args.backend])
    s = await run_one(args.scenario, args.backend, args.langs.split(","), "one", 0, params)
    append_results(Path(args.results), [s])
    return 1 if s["violations"] or s["failed_expectations"] else 0


async def main_soak(args: argparse.Namespace) -> int:
    backends = args.backends.split(",")
    start_backends(backends)
    summaries = []
    for i, backend in enumerate(backends):
        langs = [LANGS[(i + j) % len(LANGS)] for j in range(len(LANGS))]
        ttl_ms = 5000 if backend == "redlock" else 10000  # Redlock's max_ttl here is 5 s
        params = {"clients": args.clients, "duration_s": args.minutes * 60, "ttl_ms": ttl_ms, "writes": 2,
                  "timeout_s": args.minutes * 60 + 300}
        summaries.append(await run_one("soak", backend, langs, f"soak-{args.minutes:g}min", i, params))
        append_results(Path(args.results), summaries[-1:])
    return 1 if any(s["violations"] or s["failed_expectations"] for s in summaries) else 0


SCENARIOS["soak"] = contention


async def main_broken(args: argparse.Namespace) -> int:
    """Runs SIGSTOP and the Redis restart with the broken Rust worker (fencing off): the checker
    must find violations in each; exit 0 only if it does."""
    exe = ROOT / "target/debug/fencelock-faults-worker-broken"
    plan = load_plan()
    start_backends(["sqlite", "redis"])
    caught = 0
    cases = [("sigstop", "sqlite"), ("server-restart", "redis")]
    summaries = []
    for i, (name, backend) in enumerate(cases):
        spec = plan["scenario"][name]
        params = dict(spec.get("params", {}))
        params.update(spec.get("backend_params", {}).get(backend, {}))
        s = await run_one(name, backend, ["rust", "rust", "rust"], "broken", i, params, broken=True, rust_worker=exe)
        summaries.append(s)
        if s["violations"]:
            caught += 1
            print(f"faults: as it must, the checker caught the broken build in {name}/{backend}: {s['violations'][0]}")
        else:
            print(f"faults: ERROR: the checker found nothing wrong with the broken build in {name}/{backend}")
    append_results(Path(args.results), summaries)
    return 0 if caught == len(cases) else 1


def check_files(paths: list[str]) -> int:
    """Checks recorded histories again (history.jsonl files, or .jsonl.gz bundles of several)."""
    import gzip
    runs: dict[str, list[dict[str, Any]]] = {}
    for p in paths:
        opener = gzip.open if p.endswith(".gz") else open
        with opener(p, "rt") as f:
            for line in f:
                obj = json.loads(line)
                runs.setdefault(obj.pop("_run", p), []).append(obj)
    bad = 0
    for run_id, recs in runs.items():
        meta = next((r for r in recs if r.get("rec") == "meta"), {})
        rows = [r for r in recs if r.get("rec") == "accepted_write"]
        v = checker.check(recs, rows, forgetful=bool(meta.get("forgetful")))
        expect_fail = [r["what"] for r in recs if r.get("rec") == "expect" and not r["ok"]]
        ok = not v.violations and not expect_fail
        bad += not ok
        print(f"[{'ok' if ok else 'FAIL'}] {meta.get('run', run_id)}: {v.sections} critical sections, "
              f"{v.writes_accepted} writes accepted, {v.writes_rejected} rejected, {len(v.violations)} violations"
              + (" (broken build)" if meta.get("broken_build") else ""))
        for x in v.violations[:5] + expect_fail[:5]:
            print(f"       {x}")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=str(STATE / "results.jsonl"), help="results file to append to")
    ap.add_argument("--bundle", help="also append every run's history to this .jsonl.gz")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("short")
    s.add_argument("--backends")
    s.add_argument("--scenarios")
    s.add_argument("--rotate", type=int, help="shift the language rotation (default: the day's)")
    o = sub.add_parser("one")
    o.add_argument("scenario")
    o.add_argument("backend")
    o.add_argument("--langs", default="rust,python,node")
    k = sub.add_parser("soak")
    k.add_argument("--minutes", type=float, default=10)
    k.add_argument("--clients", type=int, default=16)
    k.add_argument("--backends", default="redis,redlock,zookeeper,postgres,mariadb,sqlite")
    sub.add_parser("broken")
    c = sub.add_parser("check", help="check recorded histories again")
    c.add_argument("files", nargs="+")
    r = sub.add_parser("report")
    r.add_argument("--out", default=str(ROOT / "tests/FAULTS.md"))
    r.add_argument("inputs", nargs="*", default=[str(HERE / "results")])
    args = ap.parse_args()
    global BUNDLE
    BUNDLE = Path(args.bundle) if args.bundle else None
    if args.cmd == "report":
        import report
        return report.write(args.inputs, Path(args.out))
    if args.cmd == "check":
        return check_files(args.files)
    fn = {"short": main_short, "one": main_one, "soak": main_soak, "broken": main_broken}[args.cmd]
    return asyncio.run(fn(args))


if __name__ == "__main__":
    sys.exit(main())
