"""The history checker of the fault suite: what fencing promises (docs/design.md §3.7), checked
against one run's recorded history.

Inputs: the records the workers and the harness wrote (JSON objects, see README.md), and the
fence's append-only log of accepted writes (`fault_writes`, in the order the store accepted them:
its rowid). All times are wall-clock microseconds on this one machine.

Properties (each failure is one violation):
  fence-order     the accepted writes, in the store's order, never have a decreasing token
  fence-answer    what the fence answered agrees with the store (an accepted write is in the log,
                  a rejected one is not)
  late-write      no lease-mode write is accepted after its lease's client deadline
  lost-probe      a lease past its client deadline reports is_lost on every read
  lost-signal     a lease known lost fires its lost signal as soon as its holder is free (not
                  while the holder is paused), and never fires while the lease still reads held
  token-order     tokens of acquisitions on one lock strictly increase in the order they happen
                  (a mutex's, a semaphore's permits; on a read-write lock, a write's token is
                  larger than every earlier read or write token: reads among themselves are free)
  permits         at no instant more than N holders of a semaphore of N permits in their
                  critical sections
  rw              never a reader's critical section overlapping a writer's, nor two writers'
  late-section    no critical section begins after its lease's client deadline

Permit and read leases cannot fence (several holders at once), so their holders record their
critical sections (`section_start`/`section_end`); a write lease's sections and its accepted
writes count as well. A section ends at the earlier of its end record and its lease's deadline
bound read after it (an unended section: a killed holder's, at the largest bound its holder
read). These bounds are the lease's own (its deadline, its `expires_at`), never a later holder's
acquire: that one is what the overlap checks judge.

The client deadline is not read by every binding, so each check uses an upper bound of it that
is sound: the deadline itself (the Rust worker reports it), the lease's `expires_at` read after
the moment being checked (TTL backends: the deadline is at most that), and, on backends that do
not forget locks, the moment a later holder's acquire returned (the server let it in only after
this lease expired there, which is after the client deadline).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Optional

# Clock reads of one wall clock from several processes, and a deadline converted from
# CLOCK_BOOTTIME: a few milliseconds of tolerance, never a speed claim.
TOLERANCE_US = 5_000
# How long after its holder is free a lost signal may take to be observed: generous (2-core CI).
SIGNAL_MARGIN_US = 3_000_000


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)
    sections: int = 0
    writes_accepted: int = 0
    writes_rejected: int = 0
    probes: int = 0
    lost_signals: int = 0
    critical_sections: int = 0  # judged sections of permit, read and write leases

    def fail(self, prop: str, text: str) -> None:
        self.violations.append(f"{prop}: {text}")


def _int(v: Any) -> Optional[int]:
    return None if v is None else int(v)


def check(
    records: list[dict[str, Any]], log_rows: list[dict[str, Any]], *, forgetful: bool = False
) -> Verdict:
    """`forgetful`: the run lost lock state on purpose (a Redis restarted without persistence),
    so a later holder's acquire says nothing about an earlier lease's deadline."""
    v = Verdict()
    acquired = [r for r in records if r.get("rec") == "acquired"]
    by_cs = {r["cs"]: r for r in acquired}
    v.sections = len(acquired)
    pauses = _pauses(records)

    # token-order: if X's acquire returned before Y's was sent, X's token is smaller.
    # Only two reads may share a token (the rule is about writes); everything else is unique.
    tokens_seen: dict[int, dict[str, Any]] = {}
    for r in acquired:
        tok = int(r["token"])
        other = tokens_seen.get(tok)
        if other is not None and not (_mode(other) == _mode(r) == "read"):
            v.fail("token-order", f"token {tok} handed out twice ({other['cs']} and {r['cs']})")
        tokens_seen[tok] = r
    by_return = sorted(acquired, key=lambda r: r["t"])
    i, best = 0, None
    for y in sorted(acquired, key=lambda r: r["t_req"]):
        while i < len(by_return) and by_return[i]["t"] < y["t_req"]:
            if best is None or int(by_return[i]["token"]) > int(best["token"]):
                best = by_return[i]
            i += 1
        if _mode(y) == "read":
            continue  # a read's token is promised nothing against earlier ones
        if best is not None and int(best["token"]) >= int(y["token"]):
            v.fail(
                "token-order",
                f"{y['cs']} got token {y['token']} after {best['cs']} got {best['token']}",
            )

    # The earliest moment each lease's client deadline had certainly passed: when a later holder's
    # acquire returned. A lease released without error was not taken over before (its release
    # found the lock still its own), so only the others get this bound.
    released = {r["cs"] for r in records if r.get("rec") == "released" and r.get("code") is None}
    taken_over_at: dict[str, int] = {}
    if not forgetful:
        for x in acquired:
            if x["cs"] in released:
                continue
            later = [
                y["t"]
                for y in acquired
                if int(y["token"]) > int(x["token"])
                and y["t"] > x["t"]
                and _excludes(_mode(x), _mode(y))
            ]
            if later:
                taken_over_at[x["cs"]] = min(later)

    def bound(cs: str, rec: dict[str, Any]) -> Optional[int]:
        """An upper bound of the lease's client deadline, as of a read taken at rec['t']."""
        candidates = [
            b
            for b in (_int(rec.get("deadline")), _int(rec.get("expires_at")), taken_over_at.get(cs))
            if b is not None
        ]
        return min(candidates) if candidates else None

    # fence-order and fence-answer
    last_token, last_row = None, None
    logged = {}
    for row in log_rows:
        tok = int(row["token"])
        if last_token is not None and tok < last_token:
            v.fail(
                "fence-order",
                f"write {row['write_id']} (token {tok}) accepted after {last_row} (token {last_token})",
            )
        if last_token is None or tok >= last_token:
            last_token, last_row = tok, row["write_id"]
        logged[row["write_id"]] = row
    writes = [r for r in records if r.get("rec") == "write"]
    for w in writes:
        in_log = w["write_id"] in logged
        if w["accepted"]:
            v.writes_accepted += 1
            if not in_log:
                v.fail(
                    "fence-answer", f"{w['write_id']} was answered accepted but is not in the store"
                )
        else:
            v.writes_rejected += 1
            if in_log and w.get("code") in (
                "STALE_TOKEN",
                "LOST",
                "INVALID_ARGUMENT",
                "NOT_HELD",
                "CLOSED",
            ):
                v.fail(
                    "fence-answer", f"{w['write_id']} was answered {w['code']} but is in the store"
                )
    writes_by_id = {w["write_id"]: w for w in writes}
    # late-write: a lease-mode write in the store, sent after the lease's deadline bound.
    for row in log_rows:
        if row["mode"] != "lease":
            continue
        answer = writes_by_id.get(row["write_id"])
        rec = answer if answer is not None else {"t": row["t_sent"]}
        b = bound(row["cs"], rec)
        if b is not None and int(row["t_sent"]) > b + TOLERANCE_US:
            v.fail(
                "late-write",
                f"{row['write_id']} (token {row['token']}) accepted though sent "
                f"{(int(row['t_sent']) - b) / 1000:.0f} ms after its lease's deadline",
            )
        if answer is not None and answer.get("lost_before"):
            v.fail(
                "late-write", f"{row['write_id']} accepted though its lease read lost just before"
            )

    # lost-probe
    probes = [r for r in records if r.get("rec") == "probe"]
    v.probes = len(probes)
    first_lost: dict[str, int] = {}
    probes_by_cs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in probes:
        b = bound(p["cs"], p)
        if not p["lost"] and b is not None and p["t"] > b + TOLERANCE_US:
            v.fail(
                "lost-probe", f"{p['cs']} read held {(p['t'] - b) / 1000:.0f} ms after its deadline"
            )
        probes_by_cs[p["cs"]].append(p)
        if p["lost"] and p["cs"] not in first_lost:
            first_lost[p["cs"]] = p["t"]

    # lost-signal
    signals = {r["cs"]: r for r in records if r.get("rec") == "lost_signal"}
    v.lost_signals = len(signals)
    killed = {r["worker"] for r in records if r.get("rec") == "fault" and r.get("kind") == "kill"}
    for cs, t_lost in first_lost.items():
        worker = by_cs[cs]["worker"] if cs in by_cs else ""
        sig = signals.get(cs)
        if sig is None:
            if worker not in killed:
                v.fail("lost-signal", f"{cs} read lost at {t_lost} but its lost signal never fired")
            continue
        free_at = _free_at(pauses.get(worker, []), t_lost)
        if sig["t"] > free_at + SIGNAL_MARGIN_US:
            v.fail(
                "lost-signal",
                f"{cs}: signal fired {(sig['t'] - free_at) / 1000:.0f} ms after the holder was free and knew",
            )
    for cs, sig in signals.items():
        worker = sig["worker"]
        for a, b in pauses.get(worker, []):
            if a < sig["t"] < b:
                v.fail("lost-signal", f"{cs}: signal recorded while its process was stopped")
        held_after = [
            p
            for p in probes_by_cs.get(cs, [])
            if not p["lost"] and p["t"] > sig["t"] + TOLERANCE_US
        ]
        if held_after:
            v.fail(
                "lost-signal",
                f"{cs}: signal fired, then the lease read held at {held_after[0]['t']}",
            )
    _check_sections(records, acquired, v)
    return v


def _mode(acquired: dict[str, Any]) -> str:
    """An acquisition's mode (records written before semaphores existed are a mutex's)."""
    return acquired.get("mode") or "exclusive"


def _excludes(earlier: str, later: str) -> bool:
    """Whether a lease of mode `later` can be granted only once the `earlier` one is gone, so
    that its grant bounds the earlier lease's client deadline."""
    if earlier == later == "exclusive":
        return True
    return "write" in (earlier, later) and {earlier, later} <= {"read", "write"}


def _own_bound(rec: dict[str, Any]) -> Optional[int]:
    """The lease's own bound of its client deadline, as read in `rec`: its deadline (Rust) or
    its expires_at, whichever is earlier; both are at most the server's expiry of the lease."""
    candidates = [
        b for b in (_int(rec.get("deadline")), _int(rec.get("expires_at"))) if b is not None
    ]
    return min(candidates) if candidates else None


@dataclass
class Section:
    cs: str
    mode: str
    permits: Optional[int]
    start: int
    end: int
    what: str


def _sections(
    records: list[dict[str, Any]], acquired: list[dict[str, Any]], v: Verdict
) -> list[Section]:
    """Every critical section, as the interval in which its lease certainly still held."""
    by_cs = {r["cs"]: r for r in acquired}
    # The largest bound each lease's holder ever read: where an unended section stops counting.
    last_bound: dict[str, int] = {}
    for r in records:
        if r.get("rec") in ("acquired", "probe", "write", "section_start", "section_end"):
            b = _own_bound(r)
            if b is not None and r.get("cs") is not None:
                last_bound[r["cs"]] = max(b, last_bound.get(r["cs"], b))
    ends = {r["section"]: r for r in records if r.get("rec") == "section_end"}
    out: list[Section] = []
    for s in records:
        if s.get("rec") != "section_start" or not s.get("started"):
            continue
        acq = by_cs.get(s["cs"], {})
        mode = s.get("mode") or _mode(acq)
        permits = _int(s.get("permits") if s.get("permits") is not None else acq.get("permits"))
        end_rec = ends.get(s["section"])
        if end_rec is not None:
            b = _own_bound(end_rec)
            end = int(end_rec["t"]) if b is None else min(int(end_rec["t"]), b)
        elif s["cs"] in last_bound:
            end = last_bound[s["cs"]]
        else:
            continue  # unended and unbounded: nothing can be said of it
        start_bound = _own_bound(end_rec or s)
        if start_bound is not None and int(s["t"]) > start_bound + TOLERANCE_US:
            v.fail(
                "late-section",
                f"{s['section']} began {(int(s['t']) - start_bound) / 1000:.0f} ms after its lease's deadline",
            )
        out.append(Section(s["cs"], mode, permits, int(s["t"]), end, s["section"]))
    # A write lease's accepted writes are moments of its critical section too.
    for w in records:
        if w.get("rec") != "write" or not w.get("accepted") or w.get("mode") != "lease":
            continue
        acq = by_cs.get(w["cs"])
        if acq is None or _mode(acq) != "write":
            continue
        b = _own_bound(w)
        end = int(w["t_end"]) if b is None else min(int(w["t_end"]), b)
        out.append(Section(w["cs"], "write", None, int(w["t"]), end, w["write_id"]))
    v.critical_sections = len(out)
    return out


def _merged(sections: list[Section]) -> list[Section]:
    """One lease's sections that overlap, merged: it counts once however it nests its work."""
    out: list[Section] = []
    by_cs: dict[str, list[Section]] = defaultdict(list)
    for s in sections:
        # Shortened by the tolerance: two sections must overlap by more than a clock read's error.
        if s.end - TOLERANCE_US > s.start:
            by_cs[s.cs].append(
                Section(s.cs, s.mode, s.permits, s.start, s.end - TOLERANCE_US, s.what)
            )
    for items in by_cs.values():
        items.sort(key=lambda s: s.start)
        cur = items[0]
        for s in items[1:]:
            if s.start <= cur.end:
                cur = Section(
                    cur.cs, cur.mode, cur.permits, cur.start, max(cur.end, s.end), cur.what
                )
            else:
                out.append(cur)
                cur = s
        out.append(cur)
    return sorted(out, key=lambda s: s.start)


def _check_sections(
    records: list[dict[str, Any]], acquired: list[dict[str, Any]], v: Verdict
) -> None:
    """permits and rw: sweeps the sections in start order, keeping those still running."""
    sections = _merged(_sections(records, acquired, v))
    running: list[Section] = []
    for s in sections:
        running = [r for r in running if r.end > s.start]
        if s.mode == "permit":
            holders = [r for r in running if r.mode == "permit"] + [s]
            limit = s.permits if s.permits is not None else 1
            if len(holders) > limit:
                v.fail(
                    "permits",
                    f"{len(holders)} holders of a semaphore of {limit} at once at {s.start}: "
                    + ", ".join(f"{h.cs} ({h.what})" for h in holders),
                )
        elif s.mode in ("read", "write"):
            for r in running:
                if r.mode in ("read", "write") and "write" in (r.mode, s.mode):
                    v.fail(
                        "rw",
                        f"{s.mode} section {s.what} of {s.cs} began at {s.start} while {r.mode} "
                        f"section {r.what} of {r.cs} ran (until {r.end + TOLERANCE_US})",
                    )
        running.append(s)


def _pauses(records: list[dict[str, Any]]) -> dict[str, list[tuple[int, int]]]:
    """SIGSTOP..SIGCONT intervals per worker, from the harness's fault records."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    stopped: dict[str, int] = {}
    for r in sorted((r for r in records if r.get("rec") == "fault"), key=lambda r: r["t"]):
        if r.get("kind") == "sigstop":
            stopped[r["worker"]] = r["t"]
        elif r.get("kind") == "sigcont" and r["worker"] in stopped:
            out[r["worker"]].append((stopped.pop(r["worker"]), r["t"]))
    return out


def _free_at(pauses: list[tuple[int, int]], t: int) -> int:
    """When a holder that learned of a loss at `t` was next free to run (after any pause)."""
    for a, b in pauses:
        if a <= t <= b:
            return b
    return t
