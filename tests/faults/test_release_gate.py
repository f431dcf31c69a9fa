"""release/check-soak.py, the release's refusal of a stale soak, on small git repositories of
its own (stdlib only): `python3 -m unittest test_release_gate` from tests/faults/."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
_spec = importlib.util.spec_from_file_location("check_soak", ROOT / "release" / "check-soak.py")
assert _spec and _spec.loader
check_soak = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_soak)


class ReleaseGate(unittest.TestCase):
    def setUp(self) -> None:
        self._dir = tempfile.TemporaryDirectory()
        self.root = Path(self._dir.name)
        self.git("init", "-q")
        self.git("config", "user.email", "test@example.invalid")
        self.git("config", "user.name", "test")

    def tearDown(self) -> None:
        self._dir.cleanup()

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=self.root, capture_output=True, text=True, check=True
        ).stdout.strip()

    def commit(self, path: str, text: str) -> str:
        file = self.root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)
        self.git("add", path)
        self.git("commit", "-q", "-m", f"change {path}")
        return self.git("rev-parse", "--short", "HEAD")

    def record_soak(self, passed: str | None, failed: str | None = None) -> str:
        soak = {}
        if passed:
            soak["last_passed"] = {"commit": passed, "date": "2026-12-07", "runs": 7}
        if failed:
            soak["last_failed"] = {"commit": failed, "date": "2026-12-07", "runs": 7}
        return self.commit(str(check_soak.SUMMARY), json.dumps({"profiles": {"soak": soak}}))

    def refusal(self) -> str:
        with self.assertRaises(check_soak.Refused) as caught:
            check_soak.covering_soak(self.root)
        return str(caught.exception)

    def test_a_soak_on_the_last_shipped_change_covers_the_release(self) -> None:
        soaked = self.commit("core/src/lib.rs", "v1")
        self.record_soak(soaked)
        self.commit("README.md", "docs after the soak need no new one")
        self.assertTrue(check_soak.covering_soak(self.root).startswith(soaked))

    def test_a_change_to_a_binding_after_the_soak_is_refused(self) -> None:
        self.record_soak(self.commit("core/src/lib.rs", "v1"))
        self.commit("node/src/lib.rs", "v2")
        self.assertIn("older than", self.refusal())

    def test_a_change_to_the_core_after_the_soak_is_refused(self) -> None:
        self.record_soak(self.commit("python/src/lib.rs", "v1"))
        self.commit("core/src/lock.rs", "v2")
        self.assertIn("older than", self.refusal())

    def test_no_soak_recorded_is_refused(self) -> None:
        self.commit("core/src/lib.rs", "v1")
        self.assertIn("no passing soak", self.refusal())
        self.record_soak(None)
        self.assertIn("no passing soak", self.refusal())

    def test_a_soak_on_uncommitted_changes_is_refused(self) -> None:
        soaked = self.commit("core/src/lib.rs", "v1")
        self.record_soak(soaked + "-dirty")
        self.assertIn("uncommitted", self.refusal())

    def test_a_failed_soak_after_the_passing_one_is_refused(self) -> None:
        soaked = self.commit("core/src/lib.rs", "v1")
        failed = self.commit("docs/x.md", "a later soak failed here")
        self.record_soak(soaked, failed)
        self.assertIn("failed", self.refusal())

    def test_a_soak_on_a_commit_this_checkout_lacks_is_refused(self) -> None:
        self.commit("core/src/lib.rs", "v1")
        self.record_soak("0123abc")
        self.assertIn("does not have", self.refusal())


if __name__ == "__main__":
    unittest.main()
