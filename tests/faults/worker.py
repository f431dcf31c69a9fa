"""The Python worker of the fault-injection suite (protocol: tests/faults/README.md).

Reads commands as JSON lines on stdin; answers and records its critical sections as JSON lines
on stdout. Runs with the fencelock wheel that python/run-tests.sh installs into target/py-venv.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any, Optional

import fencelock

INSERT_WRITE = "INSERT INTO fault_writes (write_id, cs, token, worker, lang, mode, t_sent) VALUES (?, ?, ?, ?, ?, ?, ?)"

# Errors a retry cannot cure: a cycle ends instead of spinning.
FATAL = ("INVALID_ARGUMENT", "AUTH", "CLOSED", "INTERNAL")

_out = threading.Lock()


def now_us() -> int:
    return time.time_ns() // 1000


def emit(obj: dict[str, Any]) -> None:
    line = json.dumps(obj)
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def expires_at_us(lease: Any) -> Optional[int]:
    at = lease.expires_at
    return None if at is None else int(at.timestamp() * 1_000_000)


def deadline_us(lease: Any) -> int:
    """The lease's client deadline (`valid_until`) in wall-clock µs, read now."""
    return int(lease.valid_until.timestamp() * 1_000_000)


def seconds(cmd: dict[str, Any], key: str, default: Optional[float]) -> Optional[float]:
    v = cmd.get(key)
    return default if v is None else v / 1000.0


class ReleaseFailed(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class Worker:
    def __init__(self, cmd: dict[str, Any]) -> None:
        self.name = cmd["worker"]
        self.lang = "python"
        op_timeout = seconds(cmd, "op_timeout_ms", 3.0)
        self.locker = fencelock.connect(cmd["lock_url"], operation_timeout=op_timeout)
        self.fence = fencelock.Fence.open(
            cmd["fence_url"], cmd["resource"], operation_timeout=op_timeout
        )
        self.lock = cmd["lock"]
        # Names taken with `lock` as one multi-name lock by every exclusive acquire (`also` at
        # init); the worker's lease is then the multi-lock's part for `lock`.
        self.also: list[str] = list(cmd.get("also") or [])
        self.multi: Any = None
        self.lease: Any = None
        self.last: Optional[tuple[str, int]] = None
        self.sections = 0
        self.writes = 0
        # The open critical section of a permit, read or write lease (its id), and how many
        # this worker began, so that their ids are unique.
        self.open_section: Optional[str] = None
        self.begun = 0
        # The semaphore's N of the current lease (None unless it is a permit).
        self.permits: Optional[int] = None

    def rec(self, kind: str, **fields: Any) -> None:
        emit({"rec": kind, "worker": self.name, "lang": self.lang, **fields})

    def cs(self) -> str:
        return f"{self.name}#{self.sections}"

    def take(self, mode: str, permits: Optional[int], ttl: float, wait: Optional[float]) -> Any:
        """A lease in the mode asked for: a mutex's, a semaphore's permit, a read or a write."""
        if mode == "exclusive" and self.also:
            self.multi = self.locker.acquire_many([self.lock, *self.also], ttl=ttl, wait=wait)
            return self.multi.part(self.lock)
        if mode == "exclusive":
            return self.locker.acquire(self.lock, ttl=ttl, wait=wait)
        if mode == "permit":
            if not isinstance(permits, int):
                raise ValueError("a permit needs permits: a number")
            lock = self.locker.semaphore(self.lock, permits, ttl=ttl, wait=wait)
        elif mode == "read":
            lock = self.locker.read_lock(self.lock, ttl=ttl, wait=wait)
        elif mode == "write":
            lock = self.locker.write_lock(self.lock, ttl=ttl, wait=wait)
        else:
            raise ValueError(f"unknown mode {mode!r}")
        # Entered by hand, not in a `with`: the lease outlives this call, and release() below
        # ends it as the mutex's is ended.
        return lock.__enter__()

    def acquire(self, cmd: dict[str, Any], mode: Optional[str] = None) -> dict[str, Any]:
        # A new lease ends the work done under the previous one.
        self.end_section()
        self.multi = None
        ttl = seconds(cmd, "ttl_ms", 10.0) or 10.0
        wait = seconds(cmd, "wait_ms", None)
        permits = cmd.get("permits")
        t_req = now_us()
        lease = self.take(mode or cmd.get("mode") or "exclusive", permits, ttl, wait)
        t = now_us()
        self.sections += 1
        self.permits = permits if lease.mode == "permit" else None
        cs = self.cs()
        self.rec(
            "acquired",
            cs=cs,
            token=str(lease.token),
            t_req=t_req,
            t=t,
            mode=lease.mode,
            permits=self.permits,
            expires_at=expires_at_us(lease),
            deadline=deadline_us(lease),
        )

        # A multi-lock is lost when any part is: the holder hears the whole's signal.
        signal = (self.multi or lease).lost

        def on_lost() -> None:
            signal.wait()
            self.rec("lost_signal", cs=cs, t=now_us(), reason=signal.reason)

        threading.Thread(target=on_lost, daemon=True).start()
        self.lease = lease
        self.last = (cs, lease.token)
        return {"token": str(lease.token)}

    def probe(self) -> dict[str, Any]:
        if self.lease is None:
            return {"lost": None}
        t = now_us()
        lost = (self.multi or self.lease).is_lost
        self.rec(
            "probe",
            cs=self.cs(),
            t=t,
            lost=lost,
            expires_at=expires_at_us(self.lease),
            deadline=deadline_us(self.lease),
        )
        return {"lost": lost}

    def judged_by_sections(self) -> bool:
        """Whether the current lease is a semaphore's or a read-write lock's, whose holders the
        checker judges by their critical sections (permits and reads cannot fence)."""
        return self.lease is not None and self.lease.mode != "exclusive"

    def begin_section(self) -> dict[str, Any]:
        """Begins a critical section: `t` is read before the lease is checked, so the section
        really began after it; a lease found lost or released begins nothing."""
        lease = self.lease
        if lease is None:
            return {"started": False, "code": "NO_LEASE"}
        if self.open_section is not None:
            return {"started": True, "code": None}
        self.begun += 1
        section = f"{self.cs()}/s{self.begun}"
        t = now_us()
        code = None
        try:
            lease.raise_if_lost()
        except fencelock.LockError as e:
            code = e.code
        self.rec(
            "section_start",
            cs=self.cs(),
            section=section,
            mode=lease.mode,
            permits=self.permits,
            t=t,
            started=code is None,
            code=code,
            deadline=deadline_us(lease),
            expires_at=expires_at_us(lease),
        )
        if code is None:
            self.open_section = section
        return {"started": code is None, "code": code}

    def end_section(self) -> dict[str, Any]:
        """Ends the open section: `t` is the work's last moment; `lost`, the deadline and the
        expiry are read after it (the checker ends the section at the earliest of them)."""
        section, self.open_section = self.open_section, None
        lease = self.lease
        if section is None or lease is None:
            return {"ended": False}
        t = now_us()
        lost = lease.is_lost
        self.rec(
            "section_end",
            cs=self.cs(),
            section=section,
            mode=lease.mode,
            t=t,
            lost=lost,
            deadline=deadline_us(lease),
            expires_at=expires_at_us(lease),
        )
        return {"ended": True, "lost": lost}

    def write(self, mode: str) -> dict[str, Any]:
        if self.last is None:
            return {"accepted": False, "code": "NO_LEASE"}
        cs, token = self.last
        self.writes += 1
        write_id = f"{cs}/{self.writes}"
        t = now_us()
        lease = self.lease
        lost_before = None if lease is None else lease.is_lost
        expires_at = None if lease is None else expires_at_us(lease)
        deadline = None if lease is None else deadline_us(lease)
        statement = (INSERT_WRITE, [write_id, cs, token, self.name, self.lang, mode, t])
        accepted, code = True, None
        try:
            self.fence.fenced_execute(
                lease if (mode == "lease" and lease is not None) else token, [statement]
            )
        except fencelock.LockError as e:
            accepted, code = False, e.code
        self.rec(
            "write",
            cs=cs,
            write_id=write_id,
            token=str(token),
            mode=mode,
            t=t,
            t_end=now_us(),
            lost_before=lost_before,
            expires_at=expires_at,
            deadline=deadline,
            accepted=accepted,
            code=code,
        )
        return {"accepted": accepted, "code": code}

    def release(self) -> dict[str, Any]:
        self.end_section()
        lease = self.multi or self.lease
        self.lease = self.multi = None
        if lease is None:
            return {}
        code = None
        try:
            lease.release()
        except fencelock.LockError as e:
            code = e.code
        self.rec("released", cs=self.cs(), t=now_us(), code=code)
        if code is not None:
            raise ReleaseFailed(code)
        return {}

    def hold(self, cmd: dict[str, Any]) -> dict[str, Any]:
        total = seconds(cmd, "ms", 1.0) or 1.0
        probe_every = seconds(cmd, "probe_ms", 0.05) or 0.05
        write_every = seconds(cmd, "write_ms", None)
        after_lost = cmd.get("stop_after_lost")
        # A permit, read or write holder works for the whole hold: one section, which ends when
        # a probe finds the lease lost (the holder stops working) or when the hold ends.
        opened = (
            self.judged_by_sections()
            and self.open_section is None
            and self.begin_section()["started"]
        )
        start = time.monotonic()
        next_write = start
        lost = False
        lost_probes = 0
        while time.monotonic() - start < total:
            lost = bool(self.probe()["lost"])
            if lost:
                self.end_section()
                lost_probes += 1
                if after_lost is not None and lost_probes > after_lost:
                    break
            if write_every is not None and time.monotonic() >= next_write:
                self.write("lease")
                next_write += write_every
            time.sleep(probe_every)
        if opened:
            self.end_section()
        return {"lost": lost}

    def cycle(self, cmd: dict[str, Any]) -> dict[str, Any]:
        duration = seconds(cmd, "duration_ms", None)
        until = None if duration is None else time.monotonic() + duration
        count = cmd.get("count")
        writes = cmd.get("writes", 1)
        hold = seconds(cmd, "hold_ms", 0.0) or 0.0
        # `modes`: the modes of successive cycles, in turn (else `mode`, else exclusive).
        modes = cmd.get("modes") or [cmd.get("mode") or "exclusive"]
        done = 0
        turn = 0
        while not (
            (count is not None and done >= count)
            or (until is not None and time.monotonic() >= until)
        ):
            mode = modes[turn % len(modes)]
            try:
                self.acquire(cmd, mode)
            except fencelock.LockError as e:
                self.rec("error", op="acquire", t=now_us(), code=e.code, message=str(e))
                if e.code in FATAL:
                    return {"cycles": done, "error": e.code}
                time.sleep(0.1)
                continue
            turn += 1
            # A permit, read or write lease's work is one section from acquire to release; only
            # a mutex's or a write lease's token can fence.
            if self.judged_by_sections():
                self.begin_section()
            for _ in range(writes):
                self.probe()
                if mode in ("exclusive", "write"):
                    self.write("lease")
            if hold:
                time.sleep(hold)
            try:
                self.release()
            except ReleaseFailed:
                pass
            done += 1
        return {"cycles": done}


def run(worker: Worker, cmd: dict[str, Any]) -> dict[str, Any]:
    op = cmd.get("op")
    if op == "acquire":
        return worker.acquire(cmd)
    if op == "begin":
        return worker.begin_section()
    if op == "end":
        return worker.end_section()
    if op == "write":
        return worker.write(cmd.get("mode", "lease"))
    if op == "probe":
        return worker.probe()
    if op == "hold":
        return worker.hold(cmd)
    if op == "release":
        return worker.release()
    if op == "cycle":
        return worker.cycle(cmd)
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    worker: Optional[Worker] = None
    for line in sys.stdin:
        try:
            cmd = json.loads(line)
        except ValueError:
            emit(
                {
                    "reply": None,
                    "ok": False,
                    "code": "INVALID_ARGUMENT",
                    "message": "not a JSON line",
                }
            )
            continue
        rid = cmd.get("id")
        try:
            if cmd.get("op") == "init":
                worker = Worker(cmd)
                result: dict[str, Any] = {"pid": os.getpid(), "broken_build": False}
            elif cmd.get("op") == "exit":
                if worker is not None:
                    worker.locker.close()
                emit({"reply": rid, "ok": True})
                return
            elif worker is None:
                raise ValueError("send init first")
            else:
                result = run(worker, cmd)
            emit({"reply": rid, "ok": True, **result})
        except (fencelock.LockError, ReleaseFailed) as e:
            emit({"reply": rid, "ok": False, "code": e.code, "message": str(e)})
        except Exception as e:  # a bug in the worker: report it, keep serving
            emit({"reply": rid, "ok": False, "code": "WORKER", "message": repr(e)})


if __name__ == "__main__":
    main()
