"""Folds run summaries into tests/faults/summary.json, the suite's committed record (stdlib only).

Every run's summary is a JSON line that harness.py appends to a results file in the state folder
($FENCELOCK_FAULTS_DIR/results.jsonl): counts, durations, violations, the command that
reproduces it. Those stay there (a CI artifact). `run.sh record [RESULTS.jsonl...]` folds them
into summary.json, which keeps only what does not change from one passing run to the next, so
that it changes only when results do:

  profiles    per profile (short, broken, soak, one): `last_passed` and `last_failed`, each
              {commit, date, runs}: the commit the invocation ran on (`-dirty` when tracked
              files were changed), the day it ended, how many scenario x backend runs it had
  scenarios   per scenario, per backend: `verdict` (pass or fail) of the latest run, `roles`
              (each role's languages, over every run recorded), `profiles` that ran it,
              `altered` (semaphores and read-write locks: each alteration of mutants.py and
              the properties the checker has reported in it), and `last_failed` ({commit, date,
              run, failures, reproduce}, and `retry: "passed"` when the run once more passed)
  soak        per backend: `verdict`, `languages`, `longest_minutes` and `most_clients` of the
              soaks that passed, `last_failed`
  broken      per scenario, per backend: `verdict` (caught or missed: the broken profile
              passes when the checker catches the broken build) and the `properties` it reported
  steps       per step of the soak besides its clients (harness.py step: each language suite on
              every backend, ...): its `command`, the `verdict` of its latest run, `last_passed`
              ({commit, date}) and `last_failed` ({commit, date, run, failures, reproduce})

Runs fold in the order given: record older results first. report.py writes FAULTS.md from it.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
from pathlib import Path
from typing import Any, Iterable, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SUMMARY = HERE / "summary.json"

Run = dict[str, Any]
Summary = dict[str, Any]

ABOUT = (
    "The fault suite's record: written by `tests/faults/run.sh record` (tests/faults/record.py), "
    "read by `run.sh report` for tests/FAULTS.md; do not edit by hand."
)
# The scenario of a run that is one of the soak's steps (harness.py step), not a scenario.
STEP = "step"
# A failure is named in at most this many lines of at most this many characters.
MAX_FAILURES = 6
MAX_CHARS = 160


def git_commit(root: Path = ROOT) -> Optional[str]:
    """`git rev-parse --short HEAD`, with `-dirty` when `git status` shows tracked changes;
    None outside a git work tree."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if status.strip() else "") if head else None


def empty() -> Summary:
    return {"about": ABOUT, "broken": {}, "profiles": {}, "scenarios": {}, "soak": {}, "steps": {}}


def load(path: Path = SUMMARY) -> Summary:
    if not path.exists():
        return empty()
    return {**empty(), **json.loads(path.read_text())}


def load_runs(paths: Iterable[str]) -> list[Run]:
    runs = []
    for p in paths:
        for line in Path(p).read_text().splitlines():
            if line.strip():
                runs.append(json.loads(line))
    return runs


def dumps(obj: Any, level: int = 0) -> str:
    """JSON with sorted keys, one key per line; a short list of plain values stays on one line
    (a role's languages), any other list has one item per line. Deterministic, so a git diff
    shows exactly what changed."""
    pad = "  " * (level + 1)
    end = "  " * level
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad}{json.dumps(k)}: {dumps(obj[k], level + 1)}" for k in sorted(obj)]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    if isinstance(obj, list):
        flat = json.dumps(obj, ensure_ascii=False)
        if not obj or (all(not isinstance(x, (dict, list)) for x in obj) and len(flat) <= 60):
            return flat
        return "[\n" + ",\n".join(pad + dumps(x, level + 1) for x in obj) + "\n" + end + "]"
    return json.dumps(obj, ensure_ascii=False)


def write(summary: Summary, path: Path = SUMMARY) -> bool:
    """Writes summary.json; True when its bytes changed."""
    text = dumps(summary) + "\n"
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


def profile_of(run: Run) -> str:
    """The profile a run belongs to: soak runs say their length (`soak-10min`)."""
    return "soak" if run["profile"].startswith("soak") else run["profile"]


def _index(run: Run) -> int:
    try:
        return int(run["run"].rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return 0


def invocations(runs: list[Run]) -> list[tuple[str, list[Run]]]:
    """The runs grouped by the invocation that ran them (its `invocation`, stamped by the
    harness), in order of appearance. Summaries from before that stamp start a new invocation
    at every run of index 0 and at every change of profile."""
    groups: dict[tuple[str, str], list[Run]] = {}
    legacy = 0
    prev: Optional[str] = None
    for r in runs:
        profile = profile_of(r)
        inv = r.get("invocation")
        if inv is None:
            if prev is None or profile != prev or _index(r) == 0:
                legacy += 1
            inv = f"legacy-{legacy}"
        prev = profile if "invocation" not in r else None
        groups.setdefault((profile, inv), []).append(r)
    return [(profile, rs) for (profile, _), rs in groups.items()]


def failed(run: Run) -> bool:
    return bool(run["violations"] or run["failed_expectations"])


def _brief(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 3] + "..."


def failures(run: Run) -> list[str]:
    """What failed, briefly: the first violation of each property broken, then the failed
    expectations."""
    first: dict[str, str] = {}
    for v in run["violations"]:
        first.setdefault(v.split(":", 1)[0], v)
    out = [f"violation {v}" for v in first.values()]
    out += [f"expectation failed: {e}" for e in run["failed_expectations"]]
    return [_brief(x) for x in out[:MAX_FAILURES]]


def _date(run: Run, fallback: str) -> str:
    return run["finished"][:10] if run.get("finished") else fallback


def _union(old: Optional[list[str]], new: Iterable[str]) -> list[str]:
    return sorted(set(old or []) | set(new))


def _minutes(profile: str) -> float | int:
    m = float(profile.removeprefix("soak-").removesuffix("min") or 0)
    return int(m) if m == int(m) else m


def fold(
    summary: Summary,
    runs: list[Run],
    commit: Optional[str] = None,
    date: Optional[str] = None,
) -> Summary:
    """summary with runs folded in, invocation by invocation (a new dict). commit and date are
    for runs that carry none (summaries from before the harness stamped its commit): by
    default the commit checked out now and today."""
    out = copy.deepcopy(summary) if summary else empty()
    for key, value in empty().items():
        out.setdefault(key, value)
    if commit is None and any("commit" not in r for r in runs):
        commit = git_commit()
    commit = commit or "unknown"
    date = date or time.strftime("%Y-%m-%d", time.gmtime())
    for profile, group in invocations(runs):
        _fold_invocation(out, profile, group, commit, date)
    return out


def _fold_invocation(s: Summary, profile: str, runs: list[Run], commit: str, date: str) -> None:
    retries = {r["retry_of"]: r for r in runs if "retry_of" in r}
    final = [r for r in runs if r["run"] not in retries]
    if profile == "broken":
        passed = all(r["violations"] for r in final)
    else:
        passed = not any(failed(r) for r in final)
    s["profiles"].setdefault(profile, {})["last_passed" if passed else "last_failed"] = {
        "commit": runs[0].get("commit") or commit,
        "date": max(_date(r, date) for r in runs),
        "runs": sum(1 for r in runs if "retry_of" not in r),
    }
    for r in runs:
        if profile == "broken":
            row = s["broken"].setdefault(r["scenario"], {}).setdefault(r["backend"], {})
            row["verdict"] = "caught" if r["violations"] else "missed"
            row["properties"] = _union(
                row.get("properties"), (v.split(":", 1)[0] for v in r["violations"])
            )
            continue
        if r["scenario"] == STEP:
            _fold_step(s, r, commit, date)
            continue
        workers = [w.split("-", 1) for w in r["langs"].split("+") if "-" in w]
        if profile == "soak":
            row = s["soak"].setdefault(r["backend"], {})
            row["languages"] = _union(row.get("languages"), (lang for _, lang in workers))
            if not failed(r):
                row["most_clients"] = max(row.get("most_clients", 0), len(workers))
                row["longest_minutes"] = max(row.get("longest_minutes", 0), _minutes(r["profile"]))
        else:
            row = s["scenarios"].setdefault(r["scenario"], {}).setdefault(r["backend"], {})
            row["profiles"] = _union(row.get("profiles"), [profile])
            roles = row.setdefault("roles", {})
            for role, lang in workers:
                roles[role] = _union(roles.get(role), [lang])
            for name, found in (r.get("mutants") or {}).items():
                altered = row.setdefault("altered", {})
                altered[name] = _union(
                    altered.get(name), (p for p in found if p != "nothing to alter")
                )
        row["verdict"] = "fail" if failed(r) else "pass"
        if failed(r):
            last = {
                "commit": r.get("commit") or commit,
                "date": _date(r, date),
                "run": r["run"],
                "failures": failures(r),
                "reproduce": r["command"]
                if profile != "soak"
                else f"tests/faults/run.sh soak --minutes {_minutes(r['profile'])} "
                f"--backends {r['backend']}",
            }
            again = retries.get(r["run"])
            if again is not None and not failed(again):
                last["retry"] = "passed"
            row["last_failed"] = last


def _fold_step(s: Summary, r: Run, commit: str, date: str) -> None:
    row = s["steps"].setdefault(r["backend"], {})
    row["command"] = r["command"]
    when = {"commit": r.get("commit") or commit, "date": _date(r, date)}
    if failed(r):
        row["verdict"] = "fail"
        row["last_failed"] = {
            **when,
            "run": r["run"],
            "failures": failures(r),
            "reproduce": r["command"],
        }
    else:
        row["verdict"] = "pass"
        row["last_passed"] = when


def record(
    paths: list[str],
    summary_path: Path = SUMMARY,
    invocation: Optional[str] = None,
    commit: Optional[str] = None,
    date: Optional[str] = None,
) -> int:
    """`harness.py record`: folds the runs of paths (only those of invocation, if given) into
    summary_path. FAULTS.md is the caller's (harness.py: report.write)."""
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        print(f"faults: no results file {', '.join(missing)}")
        return 1
    runs = load_runs(paths)
    if invocation is not None:
        runs = [r for r in runs if r.get("invocation") == invocation]
    if not runs:
        print("faults: no run to record")
        return 0
    before = load(summary_path)
    after = fold(before, runs, commit=commit, date=date)
    changed = write(after, summary_path)
    for profile, group in invocations(runs):
        n = sum(1 for r in group if "retry_of" not in r)
        print(f"faults: recorded {n} {profile} runs")
    print(f"faults: {summary_path}: {'updated' if changed else 'unchanged'}")
    return 0
