"""Each property of checker.py, shown to fire on a small history that breaks it and to stay quiet
on one that keeps it (stdlib unittest; run.sh runs it before the scenarios)."""

from __future__ import annotations

import unittest
from typing import Any

import checker

S = 1_000_000  # one second in microseconds


def acquired(
    cs: str,
    token: int,
    t_req: int,
    t: int,
    expires_at: int | None = None,
    deadline: int | None = None,
) -> dict[str, Any]:
    return {
        "rec": "acquired",
        "worker": cs.split("#")[0],
        "lang": "rust",
        "cs": cs,
        "token": str(token),
        "t_req": t_req,
        "t": t,
        "expires_at": expires_at,
        "deadline": deadline,
    }


def write(
    cs: str,
    n: int,
    token: int,
    t: int,
    accepted: bool,
    code: str | None = None,
    lost_before: bool = False,
    expires_at: int | None = None,
    mode: str = "lease",
) -> dict[str, Any]:
    return {
        "rec": "write",
        "worker": cs.split("#")[0],
        "lang": "rust",
        "cs": cs,
        "write_id": f"{cs}/{n}",
        "token": str(token),
        "mode": mode,
        "t": t,
        "t_end": t + 1000,
        "lost_before": lost_before,
        "expires_at": expires_at,
        "deadline": None,
        "accepted": accepted,
        "code": code,
    }


def row(cs: str, n: int, token: int, t: int, mode: str = "lease") -> dict[str, Any]:
    return {"write_id": f"{cs}/{n}", "cs": cs, "token": token, "mode": mode, "t_sent": t}


def probe(cs: str, t: int, lost: bool, expires_at: int | None = None) -> dict[str, Any]:
    return {
        "rec": "probe",
        "worker": cs.split("#")[0],
        "lang": "rust",
        "cs": cs,
        "t": t,
        "lost": lost,
        "expires_at": expires_at,
        "deadline": None,
    }


def signal(cs: str, t: int) -> dict[str, Any]:
    return {
        "rec": "lost_signal",
        "worker": cs.split("#")[0],
        "lang": "rust",
        "cs": cs,
        "t": t,
        "reason": "expired",
    }


def fault(kind: str, worker: str, t: int) -> dict[str, Any]:
    return {"rec": "fault", "kind": kind, "worker": worker, "t": t}


def props(v: checker.Verdict) -> set[str]:
    return {x.split(":", 1)[0] for x in v.violations}


class CheckerTest(unittest.TestCase):
    def stale_holder(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """A (token 10) stopped at 1 s past its 2 s ttl; B (token 20) takes over at 4 s and writes;
        A resumes at 6 s, reads lost, its signal fires, its write is refused."""
        recs = [
            acquired("A#1", 10, 0, 1000, expires_at=2 * S),
            write("A#1", 1, 10, 500_000, True, expires_at=2 * S),
            fault("sigstop", "A", 1 * S),
            acquired("B#1", 20, 1 * S, 4 * S, expires_at=6 * S),
            write("B#1", 1, 20, 4 * S + 100, True, expires_at=6 * S),
            fault("sigcont", "A", 6 * S),
            probe("A#1", 6 * S + 1000, True, expires_at=2 * S),
            signal("A#1", 6 * S + 2000),
            write("A#1", 2, 10, 6 * S + 3000, False, "LOST", lost_before=True, expires_at=2 * S),
        ]
        rows = [row("A#1", 1, 10, 500_000), row("B#1", 1, 20, 4 * S + 100)]
        return recs, rows

    def test_a_history_that_keeps_every_promise_passes(self) -> None:
        recs, rows = self.stale_holder()
        v = checker.check(recs, rows)
        self.assertEqual(v.violations, [])
        self.assertEqual((v.sections, v.writes_accepted, v.writes_rejected), (2, 2, 1))

    def test_fence_order(self) -> None:
        recs, rows = self.stale_holder()
        recs[-1] = write("A#1", 2, 10, 6 * S + 3000, True, mode="token")
        rows.append(row("A#1", 2, 10, 6 * S + 3000, mode="token"))
        self.assertIn("fence-order", props(checker.check(recs, rows)))

    def test_fence_answer(self) -> None:
        recs, rows = self.stale_holder()
        rows.pop()  # B's write answered accepted, missing from the store
        self.assertEqual(props(checker.check(recs, rows)), {"fence-answer"})
        recs, rows = self.stale_holder()
        rows.insert(1, row("A#1", 2, 10, 6 * S + 3000))  # refused with LOST, yet in the store
        self.assertIn("fence-answer", props(checker.check(recs, rows)))

    def test_late_write(self) -> None:
        recs = [
            acquired("A#1", 10, 0, 1000, expires_at=2 * S),
            write("A#1", 1, 10, 3 * S, True, expires_at=2 * S),
        ]
        self.assertEqual(props(checker.check(recs, [row("A#1", 1, 10, 3 * S)])), {"late-write"})

    def test_late_write_bounded_by_a_later_holder_on_zookeeper(self) -> None:
        """No expires_at (ZooKeeper from Python or Node): a later holder's acquire bounds the deadline."""
        recs = [
            acquired("A#1", 10, 0, 1000),
            acquired("B#1", 20, 1 * S, 4 * S),
            write("A#1", 1, 10, 5 * S, True),
        ]
        self.assertEqual(props(checker.check(recs, [row("A#1", 1, 10, 5 * S)])), {"late-write"})
        # ... unless the run made the server forget its locks
        self.assertEqual(
            checker.check(recs, [row("A#1", 1, 10, 5 * S)], forgetful=True).violations, []
        )

    def test_lost_probe(self) -> None:
        recs, rows = self.stale_holder()
        recs[6] = probe("A#1", 6 * S + 1000, False, expires_at=2 * S)
        self.assertIn("lost-probe", props(checker.check(recs, rows)))

    def test_lost_signal_missing_late_or_while_stopped(self) -> None:
        recs, rows = self.stale_holder()
        del recs[7]
        self.assertEqual(props(checker.check(recs, rows)), {"lost-signal"})
        recs, rows = self.stale_holder()
        recs[7] = signal("A#1", 6 * S + 5 * S)  # 5 s after the holder was free
        self.assertEqual(props(checker.check(recs, rows)), {"lost-signal"})
        recs, rows = self.stale_holder()
        recs[7] = signal("A#1", 3 * S)  # while SIGSTOPped
        self.assertEqual(props(checker.check(recs, rows)), {"lost-signal"})

    def test_token_order(self) -> None:
        recs = [
            acquired("A#1", 20, 0, 1000),
            {"rec": "released", "cs": "A#1", "t": 2000, "code": None},
            acquired("B#1", 10, 3000, 4000),
        ]
        self.assertEqual(props(checker.check(recs, [])), {"token-order"})
        recs = [acquired("A#1", 10, 0, 1000), acquired("B#1", 10, 3000, 4000)]
        self.assertIn("token-order", props(checker.check(recs, [])))


if __name__ == "__main__":
    unittest.main()
