"""The fault suite's machinery: its own servers, the worker processes and their JSON-lines
conversation, and a run (its history, its fence, its expectations). Used by scenarios.py and
harness.py."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy import Proxy  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
STATE = Path(os.environ.get("FENCELOCK_FAULTS_DIR", "/tmp/fencelock-faults"))
SERVERS_DIR = STATE / "servers"
LANGS = ["rust", "python", "node", "jvm"]

# Our own server set: every port of tests/SERVERS.md plus 20000, state under STATE/servers.
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
PORTS = {
    k: int(os.environ.get("FENCELOCK_FAULTS_" + k.removeprefix("FENCELOCK_TEST_"), v + _OFFSET))
    for k, v in PORTS.items()
}
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
    return subprocess.run(
        ["bash", str(ROOT / "tests/servers.sh"), *args],
        env=server_env(),
        text=True,
        capture_output=True,
        check=check,
    )


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
        return f"zk://{h}:{p('zookeeper')}?session_timeout_ms={ZK_SESSION_MS}&tick_ms=500"
    if backend == "zk-ensemble":
        hosts = ",".join(f"{h}:{p(f'zk-ensemble-{i}')}" for i in range(1, 4))
        return f"zk://{hosts}?session_timeout_ms={ZK_ENSEMBLE_SESSION_MS}&tick_ms=500"
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
        if self.lang == "jvm":  # built by bindings/jvm/faults-worker/build.sh
            return [str(ROOT / "bindings/jvm/faults-worker/run.sh")]
        raise KeyError(self.lang)

    async def start(self, lock_url: str) -> None:
        env = dict(os.environ)
        if self.run.broken:
            env["FENCELOCK_FAULT_INJECTION_DISABLE_FENCING"] = "1"
        stderr = open(self.run.dir / f"{self.name}.stderr", "ab")
        self.proc = await asyncio.create_subprocess_exec(
            *self.command(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=env,
            limit=1 << 24,
        )
        stderr.close()
        self.pid = self.proc.pid
        self.reader = asyncio.create_task(self._read())
        await self.call(
            "init",
            worker=self.name,
            lock_url=lock_url,
            fence_url=self.run.fence_url,
            resource=self.run.resource,
            lock=self.run.lock,
            also=self.run.also,
            op_timeout_ms=3000,
            timeout=60,
        )

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
        self.proc.stdin.write(
            (json.dumps({"id": self.next_id, "op": op, **fields}) + "\n").encode()
        )
        return fut

    async def call(self, op: str, timeout: float = 120, **fields: Any) -> dict[str, Any]:
        reply = await asyncio.wait_for(self.send(op, **fields), timeout)
        if not reply.get("ok") and op == "init":
            raise RuntimeError(
                f"{self.name} ({self.lang}) init failed: {reply.get('code')} {reply.get('message')}"
            )
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
    rust_worker: Path = ROOT / "target/faults-workers/fencelock-faults-worker"
    records: list[dict[str, Any]] = field(default_factory=list)
    expectations: list[dict[str, Any]] = field(default_factory=list)
    workers: list[Worker] = field(default_factory=list)
    proxies: list[Proxy] = field(default_factory=list)
    forgetful: bool = False
    # Names every worker takes with the lock as one multi-name lock (the multi-* scenarios).
    also: list[str] = field(default_factory=list)

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
            " t_commit INTEGER DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)))"
        )
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
