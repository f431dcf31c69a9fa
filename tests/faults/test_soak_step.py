"""harness.py's `step`, which runs one of the soak's commands (stdlib only): `python3 -m
unittest test_soak_step` from tests/faults/."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Exits 0 when SIGINT raises KeyboardInterrupt (Python's default), 7 when it is ignored.
PROBE = (
    "import signal, sys; "
    "sys.exit(0 if signal.getsignal(signal.SIGINT) is signal.default_int_handler else 7)"
)


def ignore_interrupts() -> None:
    # What a background job of a shell without job control starts with.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


class SoakStep(unittest.TestCase):
    def run_step(self, *command: str) -> tuple[int, dict]:
        with tempfile.TemporaryDirectory() as tmp:
            results = Path(tmp) / "results.jsonl"
            code = subprocess.run(
                [
                    sys.executable,
                    str(HERE / "harness.py"),
                    "--results",
                    str(results),
                    "step",
                    "probe",
                    "--minutes",
                    "1",
                    "--",
                    *command,
                ],
                preexec_fn=ignore_interrupts,
                capture_output=True,
                text=True,
            ).returncode
            lines = results.read_text().splitlines()
        self.assertEqual(len(lines), 1)
        return code, json.loads(lines[0])

    def test_a_step_gets_ctrl_c_back_when_the_soak_was_started_without_it(self) -> None:
        code, result = self.run_step(sys.executable, "-c", PROBE)
        self.assertEqual(code, 0)
        self.assertEqual(result["backend"], "probe")
        self.assertEqual(result["failed_expectations"], [])

    def test_a_failing_step_is_recorded_as_failed(self) -> None:
        code, result = self.run_step(sys.executable, "-c", "raise SystemExit(3)")
        self.assertNotEqual(code, 0)
        self.assertTrue(result["failed_expectations"], result)


if __name__ == "__main__":
    unittest.main()
