"""Altered copies of a semaphore or read-write lock run's history, which the checker must flag:
the broken build's counterpart for leases that cannot fence (its switch turns off fencing, which
they do not use). A run names its alterations in scenarios.toml (`mutants`); harness.py checks
each and fails the run when the checker finds nothing wrong with one.

  fewer-permits   the semaphore's N lowered by one in every record: the holders that ran
                  together are now one too many (expects `permits`)
  reads-as-writes every read lease turned into a write lease: the readers that ran together are
                  now writers together (expects `rw`)
  early-grant     the lease granted after the fault (kill, stop, session loss) moved to 200 ms
                  before the faulted lease's deadline, as a backend that let it in too early
                  would have (expects `permits` or `rw`)
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import checker

Records = list[dict[str, Any]]
EARLY_US = 200_000
TIME_FIELDS = ("t", "t_req", "t_end")


def fewer_permits(records: Records) -> Optional[Records]:
    if not any((r.get("permits") or 0) >= 2 for r in records):
        return None
    return [dict(r, permits=r["permits"] - 1) if r.get("permits") else r for r in records]


def reads_as_writes(records: Records) -> Optional[Records]:
    if not any(r.get("mode") == "read" for r in records):
        return None
    return [dict(r, mode="write") if r.get("mode") == "read" else r for r in records]


def early_grant(records: Records) -> Optional[Records]:
    faults = [
        r
        for r in records
        if r.get("rec") == "fault" and r.get("kind") in FAULTED_BY and "worker" in r
    ]
    if not faults:
        return None
    fault = min(faults, key=lambda r: r["t"])
    acquired = [r for r in records if r.get("rec") == "acquired"]
    victim = next(
        (r for r in acquired if r["worker"] == fault["worker"] and r["t"] < fault["t"]), None
    )
    successor = min(
        (r for r in acquired if r["worker"] != fault["worker"] and r["t"] > fault["t"]),
        key=lambda r: r["t"],
        default=None,
    )
    if victim is None or successor is None:
        return None
    bounds = [checker._own_bound(r) for r in records if r.get("cs") == victim["cs"]]
    last = max((b for b in bounds if b is not None), default=None)
    if last is None:
        return None
    shift = successor["t"] - (last - EARLY_US)
    out = []
    for r in records:
        if r.get("cs") == successor["cs"]:
            r = dict(r)
            for k in TIME_FIELDS:
                if r.get(k) is not None:
                    r[k] -= shift
            for k in ("deadline", "expires_at"):
                if r.get(k) is not None:
                    r[k] -= shift
        out.append(r)
    return out


# The faults after which another lease is granted: the first one hit the holder of `victim`.
FAULTED_BY = ("kill", "sigstop", "partition-drop")

MUTANTS: dict[str, tuple[Callable[[Records], Optional[Records]], set[str]]] = {
    "fewer-permits": (fewer_permits, {"permits"}),
    "reads-as-writes": (reads_as_writes, {"rw"}),
    "early-grant": (early_grant, {"permits", "rw"}),
}


def judge(
    names: list[str], records: Records, rows: list[dict[str, Any]], forgetful: bool
) -> dict[str, dict[str, Any]]:
    """For each alteration: whether the checker caught it (found an expected property broken)
    and the properties it found; a run with nothing to alter counts as not caught."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        alter, expected = MUTANTS[name]
        altered = alter(records)
        if altered is None:
            out[name] = {"caught": False, "found": ["nothing to alter"]}
            continue
        v = checker.check(altered, rows, forgetful=forgetful)
        found = sorted({x.split(":", 1)[0] for x in v.violations})
        out[name] = {"caught": bool(expected & set(found)), "found": found}
    return out
