"""Each property of checker.py, shown to fire on a small history that breaks it and to stay quiet
on one that keeps it (stdlib unittest; run.sh runs it before the scenarios): the mutex's, then a
semaphore's and a read-write lock's."""

from __future__ import annotations

import unittest
from typing import Any

import checker
import mutants

S = 1_000_000  # one second in microseconds


def acquired(
    cs: str,
    token: int,
    t_req: int,
    t: int,
    expires_at: int | None = None,
    deadline: int | None = None,
    mode: str | None = None,
    permits: int | None = None,
) -> dict[str, Any]:
    rec = {
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
    if mode is not None:  # histories from before semaphores carry no mode: a mutex's
        rec.update(mode=mode, permits=permits)
    return rec


def section(
    cs: str,
    n: int,
    mode: str,
    start: int,
    end: int | None,
    deadline: int,
    permits: int | None = None,
    started: bool = True,
) -> list[dict[str, Any]]:
    """A critical section's records: its start, and its end (None: its holder was killed) with
    the lease's deadline as read after it."""
    worker, sid = cs.split("#")[0], f"{cs}/s{n}"
    common = {"worker": worker, "lang": "rust", "cs": cs, "section": sid, "mode": mode}
    out = [
        {
            "rec": "section_start",
            **common,
            "permits": permits,
            "t": start,
            "started": started,
            "code": None if started else "LOST",
            "deadline": deadline,
            "expires_at": None,
        }
    ]
    if end is not None and started:
        out.append(
            {
                "rec": "section_end",
                **common,
                "t": end,
                "lost": end > deadline,
                "deadline": deadline,
                "expires_at": None,
            }
        )
    return out


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


class SemaphoreTest(unittest.TestCase):
    """A semaphore of 2: A and B hold from 1 s; A is stopped and its deadline passes at 3 s (its
    section's end record, after SIGCONT at 9 s, is cut there); C gets the permit at 4 s."""

    def history(self, a_deadline: int = 3 * S) -> list[dict[str, Any]]:
        return [
            acquired("A#1", 10, 0, 1 * S, deadline=a_deadline, mode="permit", permits=2),
            acquired("B#1", 11, 0, 1 * S + 1000, deadline=8 * S, mode="permit", permits=2),
            *section("A#1", 1, "permit", 1 * S + 10, 9 * S, a_deadline, permits=2),
            *section("B#1", 1, "permit", 1 * S + 2000, 5 * S, 8 * S, permits=2),
            acquired("C#1", 12, 2 * S, 4 * S, deadline=7 * S, mode="permit", permits=2),
            *section("C#1", 1, "permit", 4 * S + 10, 6 * S, 7 * S, permits=2),
        ]

    def test_at_most_n_holders_passes(self) -> None:
        v = checker.check(self.history(), [])
        self.assertEqual(v.violations, [])
        self.assertEqual(v.critical_sections, 3)

    def test_a_section_counts_until_its_lease_s_deadline_only(self) -> None:
        # Had A's lease still held at 4 s, A, B and C would be 3 holders of 2.
        self.assertEqual(props(checker.check(self.history(a_deadline=5 * S), [])), {"permits"})

    def test_more_than_n_holders(self) -> None:
        recs = self.history() + [
            acquired("D#1", 13, 2 * S, 4 * S + 500, deadline=9 * S, mode="permit", permits=2),
            *section("D#1", 1, "permit", 4 * S + 600, 5 * S, 9 * S, permits=2),
        ]
        v = checker.check(recs, [])
        self.assertEqual(props(v), {"permits"})
        self.assertIn("3 holders of a semaphore of 2", v.violations[0])

    def test_a_killed_holder_s_section_ends_at_the_last_deadline_it_read(self) -> None:
        recs = self.history()
        recs[2:4] = section("A#1", 1, "permit", 1 * S + 10, None, 3 * S, permits=2)
        self.assertEqual(checker.check(recs, []).violations, [])
        recs.append(probe("A#1", 2 * S, False) | {"deadline": 5 * S})  # renewed: held until 5 s
        self.assertEqual(props(checker.check(recs, [])), {"permits"})

    def test_a_section_begun_after_the_deadline(self) -> None:
        recs = self.history()
        recs += section("A#1", 2, "permit", 9 * S + 100, 9 * S + 200, 3 * S, permits=2)
        self.assertEqual(props(checker.check(recs, [])), {"late-section"})
        # refused, as it must be: nothing began
        recs[-2:] = section("A#1", 2, "permit", 9 * S + 100, None, 3 * S, started=False)
        self.assertEqual(checker.check(recs, []).violations, [])

    def test_permit_tokens_increase_in_grant_order(self) -> None:
        recs = self.history()
        recs[4] = acquired("C#1", 9, 2 * S, 4 * S, deadline=7 * S, mode="permit", permits=2)
        self.assertEqual(props(checker.check(recs, [])), {"token-order"})
        recs[4] = acquired("C#1", 11, 2 * S, 4 * S, deadline=7 * S, mode="permit", permits=2)
        self.assertIn("token-order", props(checker.check(recs, [])))  # B's token, twice

    def test_a_later_permit_is_no_bound_on_an_earlier_lease(self) -> None:
        """Permits run at once: C's acquire says nothing of B's deadline (a mutex's would)."""
        recs = self.history() + [probe("B#1", 4 * S + 100, False) | {"deadline": 8 * S}]
        self.assertEqual(checker.check(recs, []).violations, [])


class ReadWriteTest(unittest.TestCase):
    """Readers A and B from 1 s; A is stopped and its deadline passes at 3 s; B ends at 2 s; the
    writer C gets in at 4 s and writes through the fence; the reader D after C released."""

    def history(self, a_deadline: int = 3 * S) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        recs = [
            acquired("A#1", 10, 0, 1 * S, deadline=a_deadline, mode="read"),
            acquired("B#1", 11, 0, 1 * S + 1000, deadline=8 * S, mode="read"),
            *section("A#1", 1, "read", 1 * S + 10, 9 * S, a_deadline),
            *section("B#1", 1, "read", 1 * S + 2000, 2 * S, 8 * S),
            {"rec": "released", "cs": "B#1", "t": 2 * S + 10, "code": None},
            acquired("C#1", 12, 1 * S + 500_000, 4 * S, deadline=7 * S, mode="write"),
            *section("C#1", 1, "write", 4 * S + 10, 6 * S, 7 * S),
            write("C#1", 1, 12, 5 * S, True) | {"deadline": 7 * S},
            {"rec": "released", "cs": "C#1", "t": 6 * S + 10, "code": None},
            acquired("D#1", 13, 2 * S, 6 * S + 100, deadline=9 * S, mode="read"),
            *section("D#1", 1, "read", 6 * S + 200, 7 * S, 9 * S),
        ]
        return recs, [row("C#1", 1, 12, 5 * S)]

    def test_readers_together_then_a_writer_alone_passes(self) -> None:
        recs, rows = self.history()
        v = checker.check(recs, rows)
        self.assertEqual(v.violations, [])
        self.assertEqual(v.critical_sections, 5)

    def test_a_reader_with_a_writer(self) -> None:
        recs, rows = self.history(a_deadline=5 * S)
        self.assertEqual(props(checker.check(recs, rows)), {"rw"})

    def test_a_writer_s_accepted_write_is_part_of_its_section(self) -> None:
        recs, rows = self.history()
        recs[-5:-4] = []  # C's section records gone: its write at 5 s still overlaps D's read
        recs[-2:] = section("D#1", 1, "read", 4 * S + 900_000, 7 * S, 9 * S)
        self.assertEqual(props(checker.check(recs, rows)), {"rw"})

    def test_two_writers(self) -> None:
        recs, rows = self.history()
        recs += [
            acquired("E#1", 14, 4 * S + 100_000, 4 * S + 200_000, deadline=9 * S, mode="write"),
            *section("E#1", 1, "write", 4 * S + 300_000, 4 * S + 900_000, 9 * S),
        ]
        v = checker.check(recs, rows)
        self.assertEqual(props(v), {"rw"})
        self.assertIn("write section E#1/s1 of E#1 began", v.violations[0])

    def test_a_write_token_above_every_earlier_read_or_write(self) -> None:
        recs, rows = self.history()
        recs[7] = acquired("C#1", 11, 1 * S + 500_000, 4 * S, deadline=7 * S, mode="write")
        self.assertEqual(props(checker.check(recs, rows)), {"token-order"})

    def test_reads_are_promised_nothing_about_their_tokens(self) -> None:
        recs, rows = self.history()
        recs[1] = acquired("B#1", 10, 0, 1 * S + 1000, deadline=8 * S, mode="read")  # A's token
        recs[-3] = acquired("D#1", 5, 2 * S, 6 * S + 100, deadline=9 * S, mode="read")
        self.assertEqual(checker.check(recs, rows).violations, [])

    def test_a_writer_bounds_a_reader_s_deadline(self) -> None:
        """C's write lease was granted once A's read lease was gone: A reading held later is wrong."""
        recs, rows = self.history()
        recs.append(probe("A#1", 4 * S + 100_000, False))
        self.assertEqual(props(checker.check(recs, rows)), {"lost-probe"})


class MutantsTest(unittest.TestCase):
    """mutants.py: each alteration of a history that keeps every promise is caught."""

    def test_a_semaphore_history_altered(self) -> None:
        recs = SemaphoreTest().history() + [fault("sigstop", "A", 1 * S + 500_000)]
        self.assertEqual(checker.check(recs, []).violations, [])
        judged = mutants.judge(["fewer-permits", "early-grant"], recs, [], False)
        self.assertEqual(judged["fewer-permits"], {"caught": True, "found": ["permits"]})
        self.assertTrue(judged["early-grant"]["caught"], judged)

    def test_a_read_write_history_altered(self) -> None:
        recs, rows = ReadWriteTest().history()
        recs.append(fault("sigstop", "A", 1 * S + 500_000))
        judged = mutants.judge(["reads-as-writes", "early-grant"], recs, rows, False)
        self.assertTrue(judged["reads-as-writes"]["caught"], judged)
        self.assertIn("rw", judged["early-grant"]["found"])

    def test_nothing_to_alter_is_a_miss(self) -> None:
        recs, rows = ReadWriteTest().history()  # no fault: no lease granted after one
        judged = mutants.judge(["early-grant", "fewer-permits"], recs, rows, False)
        self.assertFalse(judged["early-grant"]["caught"])
        self.assertFalse(judged["fewer-permits"]["caught"])


if __name__ == "__main__":
    unittest.main()
