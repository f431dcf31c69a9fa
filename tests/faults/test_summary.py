"""record.py's folding of run summaries into summary.json, and report.py's FAULTS.md from it
(stdlib unittest; run.sh short runs it beside test_checker): a passing run that changes no result
leaves summary.json byte-identical, a failing one flips its verdict and records last_failed."""

from __future__ import annotations

import contextlib
import io
import tempfile
import unittest
from pathlib import Path
from typing import Any

import record
import report


def run(
    scenario: str,
    backend: str,
    index: int,
    langs: str = "A-rust+B-python+C-node",
    profile: str = "short",
    invocation: str | None = "inv-1",
    commit: str | None = "abc1234",
    violations: list[str] | None = None,
    failed_expectations: list[str] | None = None,
    finished: str = "2026-12-05 10:00:00 UTC",
    **extra: Any,
) -> dict[str, Any]:
    """A run's summary as harness.py writes it (with counts and times that must not matter)."""
    r: dict[str, Any] = {
        "run": f"{scenario}-{backend}-20261205T100000-{index}",
        "profile": profile,
        "scenario": scenario,
        "backend": backend,
        "langs": langs,
        "broken_build": profile == "broken",
        "seconds": 1.0 + index,
        "sections": 12 + index,
        "writes_accepted": 24 + index,
        "writes_rejected": index,
        "probes": 24,
        "violations": violations or [],
        "expectations": 3,
        "failed_expectations": failed_expectations or [],
        "history": f"/tmp/fencelock-faults/runs/{scenario}-{backend}-{index}/history.jsonl",
        "command": f"tests/faults/run.sh one {scenario} {backend} --langs rust,python,node",
        "finished": finished,
        **extra,
    }
    if invocation is not None:
        r["invocation"] = invocation
    if commit is not None:
        r["commit"] = commit
    return r


def short_profile(invocation: str, langs: str, commit: str = "abc1234") -> list[dict[str, Any]]:
    return [
        run("contention", "redis", 0, langs, invocation=invocation, commit=commit),
        run("kill9", "sqlite", 1, langs, invocation=invocation, commit=commit),
        run(
            "semaphore-kill9",
            "redis",
            2,
            langs + "+D-jvm",
            invocation=invocation,
            commit=commit,
            mutants={"fewer-permits": ["permits"], "early-grant": ["permits"]},
        ),
    ]


class Folding(unittest.TestCase):
    def test_a_passing_run_that_changes_no_result_leaves_the_file_byte_identical(self) -> None:
        langs = "A-rust+B-python+C-node"
        once = record.fold(record.empty(), short_profile("inv-1", langs))
        # Another passing invocation on the same commit and day, the same languages in each
        # role: other counts, durations, run ids and times.
        again = [
            dict(r, seconds=r["seconds"] * 3, sections=99, finished="2026-12-05 11:00:00 UTC")
            for r in short_profile("inv-2", langs)
        ]
        twice = record.fold(once, again)
        self.assertEqual(record.dumps(once), record.dumps(twice))
        p = once["profiles"]["short"]["last_passed"]
        self.assertEqual(p, {"commit": "abc1234", "date": "2026-12-05", "runs": 3})
        row = once["scenarios"]["contention"]["redis"]
        self.assertEqual(
            row,
            {
                "profiles": ["short"],
                "roles": {"A": ["rust"], "B": ["python"], "C": ["node"]},
                "verdict": "pass",
            },
        )
        self.assertEqual(
            once["scenarios"]["semaphore-kill9"]["redis"]["altered"],
            {"early-grant": ["permits"], "fewer-permits": ["permits"]},
        )

    def test_a_new_commit_changes_last_passed_only(self) -> None:
        once = record.fold(record.empty(), short_profile("inv-1", "A-rust+B-python+C-node"))
        later = record.fold(once, short_profile("inv-2", "A-rust+B-python+C-node", "def5678"))
        self.assertEqual(later["profiles"]["short"]["last_passed"]["commit"], "def5678")
        self.assertEqual(later["scenarios"], once["scenarios"])

    def test_new_languages_in_a_role_are_added(self) -> None:
        once = record.fold(record.empty(), short_profile("inv-1", "A-rust+B-python+C-node"))
        later = record.fold(once, short_profile("inv-2", "A-jvm+B-rust+C-python"))
        self.assertEqual(
            later["scenarios"]["kill9"]["sqlite"]["roles"],
            {"A": ["jvm", "rust"], "B": ["python", "rust"], "C": ["node", "python"]},
        )

    def test_a_failing_run_flips_the_verdict_and_records_last_failed(self) -> None:
        once = record.fold(record.empty(), short_profile("inv-1", "A-rust+B-python+C-node"))
        bad = short_profile("inv-2", "A-rust+B-python+C-node", "def5678")
        bad[1] = dict(
            bad[1],
            violations=[
                "fence-order: write A-rust#1/2 (token 2) accepted after B-python#1/1 (token 3)",
                "fence-order: write A-rust#1/3 (token 2) accepted after B-python#1/1 (token 3)",
                "late-write: write A-rust#1/2 accepted 2.1 s after its deadline",
            ],
            failed_expectations=["its fenced write with the lease is refused with LOST"],
            finished="2026-12-06 09:00:00 UTC",
        )
        after = record.fold(once, bad)
        profile = after["profiles"]["short"]
        self.assertEqual(profile["last_passed"], once["profiles"]["short"]["last_passed"])
        self.assertEqual(
            profile["last_failed"], {"commit": "def5678", "date": "2026-12-06", "runs": 3}
        )
        row = after["scenarios"]["kill9"]["sqlite"]
        self.assertEqual(row["verdict"], "fail")
        self.assertEqual(row["last_failed"]["commit"], "def5678")
        self.assertEqual(row["last_failed"]["run"], bad[1]["run"])
        self.assertEqual(row["last_failed"]["reproduce"], bad[1]["command"])
        self.assertEqual(
            row["last_failed"]["failures"],
            [
                "violation fence-order: write A-rust#1/2 (token 2) accepted after B-python#1/1 (token 3)",
                "violation late-write: write A-rust#1/2 accepted 2.1 s after its deadline",
                "expectation failed: its fenced write with the lease is refused with LOST",
            ],
        )
        self.assertEqual(after["scenarios"]["contention"], once["scenarios"]["contention"])
        # Passing again: the verdict flips back, the last failure stays on record.
        healed = record.fold(after, short_profile("inv-3", "A-rust+B-python+C-node", "0a0a0a0"))
        row = healed["scenarios"]["kill9"]["sqlite"]
        self.assertEqual(row["verdict"], "pass")
        self.assertEqual(row["last_failed"]["commit"], "def5678")
        self.assertEqual(healed["profiles"]["short"]["last_passed"]["commit"], "0a0a0a0")

    def test_a_run_that_passes_on_retry(self) -> None:
        first = run(
            "kill9", "redis", 4, failed_expectations=["the waiter gets the lock within 7 s"]
        )
        again = dict(run("kill9", "redis", 1004), retry_of=first["run"])
        s = record.fold(record.empty(), [first, again])
        self.assertEqual(s["profiles"]["short"]["last_passed"]["runs"], 1)
        self.assertNotIn("last_failed", s["profiles"]["short"])
        row = s["scenarios"]["kill9"]["redis"]
        self.assertEqual(row["verdict"], "pass")
        self.assertEqual(row["last_failed"]["retry"], "passed")

    def test_the_broken_profile_passes_when_the_checker_catches_it(self) -> None:
        caught = [
            run(
                "sigstop",
                "sqlite",
                0,
                "A-rust+B-rust",
                profile="broken",
                violations=["fence-order: write A-rust#1/2 accepted after B-rust#1/1"],
                failed_expectations=["its fenced write with the lease is refused with LOST"],
            )
        ]
        s = record.fold(record.empty(), caught)
        self.assertIn("last_passed", s["profiles"]["broken"])
        self.assertEqual(
            s["broken"]["sigstop"]["sqlite"], {"properties": ["fence-order"], "verdict": "caught"}
        )
        missed = [run("sigstop", "sqlite", 0, "A-rust+B-rust", profile="broken", invocation="x")]
        s = record.fold(s, missed)
        self.assertIn("last_failed", s["profiles"]["broken"])
        self.assertEqual(s["broken"]["sigstop"]["sqlite"]["verdict"], "missed")

    def test_soak_rows(self) -> None:
        langs = "+".join(
            f"{chr(65 + i)}-{['rust', 'python', 'node', 'jvm'][i % 4]}" for i in range(16)
        )
        s = record.fold(record.empty(), [run("soak", "redis", 0, langs, profile="soak-10min")])
        s = record.fold(s, [run("soak", "redis", 0, langs, profile="soak-3min", invocation="i2")])
        self.assertEqual(
            s["soak"]["redis"],
            {
                "languages": ["jvm", "node", "python", "rust"],
                "longest_minutes": 10,
                "most_clients": 16,
                "verdict": "pass",
            },
        )
        self.assertEqual(s["profiles"]["soak"]["last_passed"]["runs"], 1)

    def test_a_failing_soak_step_fails_the_soak_and_is_kept_apart_from_the_clients(self) -> None:
        def step(index: int, code: int, invocation: str, commit: str) -> dict[str, Any]:
            failures = [f"the step exited with status {code}"] if code else []
            return run(
                record.STEP,
                "python-every-backend",
                index,
                langs="",
                profile="soak-3min",
                invocation=invocation,
                commit=commit,
                failed_expectations=failures,
                command="python/run-tests.sh",
            )

        clients = run("soak", "redis", 1, profile="soak-3min", invocation="i1", commit="c1")
        s = record.fold(record.empty(), [step(0, 0, "i1", "c1"), clients])
        self.assertEqual(
            s["steps"]["python-every-backend"],
            {
                "command": "python/run-tests.sh",
                "last_passed": {"commit": "c1", "date": "2026-12-05"},
                "verdict": "pass",
            },
        )
        self.assertEqual(list(s["soak"]), ["redis"])
        self.assertEqual(s["profiles"]["soak"]["last_passed"]["commit"], "c1")
        clients = run("soak", "redis", 1, profile="soak-3min", invocation="i2", commit="c2")
        s = record.fold(s, [step(0, 1, "i2", "c2"), clients])
        row = s["steps"]["python-every-backend"]
        self.assertEqual(row["verdict"], "fail")
        self.assertEqual(row["last_passed"]["commit"], "c1")
        self.assertEqual(row["last_failed"]["reproduce"], "python/run-tests.sh")
        self.assertEqual(s["profiles"]["soak"]["last_failed"]["commit"], "c2")
        self.assertEqual(s["profiles"]["soak"]["last_passed"]["commit"], "c1")

    def test_summaries_from_before_the_stamps_split_at_index_0(self) -> None:
        old = [
            run("contention", "redis", 0, invocation=None, commit=None),
            run("kill9", "redis", 1, invocation=None, commit=None),
            run("contention", "redis", 0, invocation=None, commit=None),
            run("sigstop", "sqlite", 0, profile="broken", invocation=None, commit=None),
            run("server-restart", "redis", 1, profile="broken", invocation=None, commit=None),
        ]
        groups = record.invocations(old)
        self.assertEqual(
            [(p, len(rs)) for p, rs in groups], [("short", 2), ("short", 1), ("broken", 2)]
        )
        s = record.fold(record.empty(), old, commit="7ce767b", date="2026-12-03")
        self.assertEqual(
            s["profiles"]["short"]["last_passed"],
            {"commit": "7ce767b", "date": "2026-12-05", "runs": 1},
        )

    def test_dumps_is_json_with_sorted_keys(self) -> None:
        s = record.fold(record.empty(), short_profile("inv-1", "A-rust+B-python+C-node"))
        text = record.dumps(s)
        self.assertEqual(record.json.loads(text), s)
        self.assertIn('"A": ["rust"]', text)
        keys = [line.split(":")[0].strip() for line in text.splitlines() if line.startswith('  "')]
        self.assertEqual(keys, sorted(keys))


class Recording(unittest.TestCase):
    def test_record_then_report(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            results = Path(d, "results.jsonl")
            other = run("contention", "sqlite", 0, invocation="someone-else")
            lines = [*short_profile("inv-1", "A-rust+B-python+C-node"), other]
            results.write_text("".join(record.json.dumps(r) + "\n" for r in lines))
            summary, out = Path(d, "summary.json"), Path(d, "FAULTS.md")
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(record.record([str(results)], summary, invocation="inv-1"), 0)
                first = summary.read_bytes()
                self.assertNotIn("sqlite", record.load(summary)["scenarios"]["contention"])
                self.assertEqual(record.record([str(results)], summary, invocation="inv-1"), 0)
                self.assertEqual(summary.read_bytes(), first)
                self.assertEqual(report.write(summary, out), 0)
            text = out.read_text()
            self.assertIn("| short | abc1234, 2026-12-05 (3 runs) |  |", text)
            self.assertIn(
                "| contention | redis | pass | A: rust; B: python; C: node | short |  | "
                "`tests/faults/run.sh one contention redis` |",
                text,
            )
            self.assertIn("| semaphore-kill9 | redis | pass | early-grant | permits |", text)
            self.assertIn("| contention | sqlite | not recorded |", text)


if __name__ == "__main__":
    unittest.main()
