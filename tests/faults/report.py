"""Writes tests/FAULTS.md from the run summaries in tests/faults/results/*.jsonl (each line is one
run, appended by harness.py; nothing in the table is typed by hand)."""

from __future__ import annotations

import json
import tomllib
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _load(inputs: list[str]) -> list[dict[str, Any]]:
    rows = []
    for inp in inputs:
        p = Path(inp)
        files = sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
        for f in files:
            for line in f.read_text().splitlines():
                if line.strip():
                    rows.append(json.loads(line))
    return rows


def _langs(s: dict[str, Any]) -> str:
    parts = s["langs"].split("+")
    if len(parts) <= 3:
        return ", ".join(p.replace("-", "=", 1) for p in parts)
    count: dict[str, int] = defaultdict(int)
    for p in parts:
        count[p.split("-", 1)[1]] += 1
    return f"{len(parts)} clients: " + ", ".join(f"{n} {lang}" for lang, n in sorted(count.items()))


# Fault scenarios that run as Rust integration tests (one backend, no worker processes), not
# through the harness, are described by hand in rust-scenarios.md, which FAULTS.md includes, so
# that it names every fault that is tested.
IN_RUST_TESTS = HERE / "rust-scenarios.md"


def _mutants(normal: list[dict[str, Any]], plan: dict[str, Any]) -> list[str]:
    """The altered histories of semaphore and read-write lock runs (mutants.py), per scenario."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in normal:
        if r.get("mutants"):
            groups[(r["scenario"], r["backend"])].append(r)
    lines = [
        "",
        "### Semaphores and read-write locks: altered histories",
        "",
        "The switch above turns off fencing, which permit and read holders do not use. Instead each",
        "run of theirs is checked again altered (`tests/faults/mutants.py`): the semaphore's N lowered",
        "by one, reads turned into writes, or the lease granted after the fault moved to 200 ms before",
        "the faulted lease's deadline. The checker must flag every altered copy, or the run fails.",
        "",
    ]
    if not groups:
        return lines + ["No such run has been recorded yet."]
    lines += [
        "| scenario | backend | runs | alterations caught / tried | properties found |",
        "|---|---|---:|---:|---|",
    ]
    order = list(plan["scenario"])
    for key in sorted(groups, key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[1])):
        rs = groups[key]
        tried = [(name, found) for r in rs for name, found in r["mutants"].items()]
        caught = sum(1 for _, found in tried if found and found != ["nothing to alter"])
        props: dict[str, set[str]] = defaultdict(set)
        for name, found in tried:
            props[name].update(found)
        found_text = "; ".join(f"{name}: {', '.join(sorted(p))}" for name, p in props.items())
        lines.append(
            f"| {key[0]} | {key[1]} | {len(rs)} | {caught} / {len(tried)} | {found_text} |"
        )
    return lines


def _ci_time(normal: list[dict[str, Any]], plan: dict[str, Any]) -> list[str]:
    """Seconds per scenario x backend in the short profile: the latest run and the mean."""
    short = [r for r in normal if r["profile"] == "short" and "retry_of" not in r]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in short:
        groups[(r["scenario"], r["backend"])].append(r)
    lines = [
        "",
        "## Time in the short profile",
        "",
        "Seconds per run (workers' start to the last release) in `run.sh short`; the latest run of",
        "each scenario x backend and the mean of all recorded ones; the languages of the latest",
        "(the rotation moves them through the roles day by day).",
        "",
    ]
    if not groups:
        return lines + ["No short profile has been recorded yet."]
    lines += [
        "| scenario | backend | languages | runs | latest s | mean s |",
        "|---|---|---|---:|---:|---:|",
    ]
    order = list(plan["scenario"])
    latest_total = {False: 0.0, True: 0.0}  # mutex scenarios, then semaphores and rw locks
    for key in sorted(groups, key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[1])):
        rs = sorted(groups[key], key=lambda r: r["finished"])
        # Only the semaphore and read-write lock scenarios check their histories' mutants.
        kinds = "mutants" in plan["scenario"].get(key[0], {}).get("params", {})
        latest_total[kinds] += rs[-1]["seconds"]
        mean = sum(r["seconds"] for r in rs) / len(rs)
        langs = sorted({w.split("-", 1)[-1] for w in rs[-1].get("langs", "").split("+") if w})
        lines.append(
            f"| {key[0]} | {key[1]} | {', '.join(langs)} | {len(rs)} | "
            f"{rs[-1]['seconds']:.1f} | {mean:.1f} |"
        )
    lines += [
        "",
        f"Latest runs together: {latest_total[False] + latest_total[True]:.0f} s, of which the "
        f"semaphore and read-write lock scenarios {latest_total[True]:.0f} s (the servers, the "
        "build and the broken build are shared with the rest).",
    ]
    return lines


def write(inputs: list[str], out: Path) -> int:
    runs = _load(inputs)
    with open(HERE / "scenarios.toml", "rb") as f:
        plan = tomllib.load(f)
    normal = [r for r in runs if not r.get("broken_build") and not r["profile"].startswith("soak")]
    soak = [r for r in runs if r["profile"].startswith("soak")]
    broken = [r for r in runs if r.get("broken_build")]

    lines = [
        "# Fault-injection results",
        "",
        "Generated by `tests/faults/run.sh report` from the run summaries in `tests/faults/results/`",
        "(appended by the harness after each run: do not edit by hand). What each scenario does and what",
        "the history checker verifies: `tests/faults/README.md`. A run passes when the checker finds no",
        "violation in its history and every expectation of its scenario held (`failed exp.`).",
        "",
        "Roles: `A` is the holder the fault hits, `B` the client that takes over (contention: all take turns).",
        "",
        "## Scenarios x backends x languages",
        "",
        "| scenario | backend | languages | runs | critical sections | writes accepted / rejected | violations | failed exp. | reproduce |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in normal:
        groups[(r["scenario"], r["backend"], _langs(r))].append(r)
    order = list(plan["scenario"])
    for key in sorted(
        groups, key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[1], k[2])
    ):
        rs = groups[key]
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {len(rs)} | {sum(r['sections'] for r in rs)} | "
            f"{sum(r['writes_accepted'] for r in rs)} / {sum(r['writes_rejected'] for r in rs)} | "
            f"{sum(len(r['violations']) for r in rs)} | {sum(len(r['failed_expectations']) for r in rs)} | "
            f"`{rs[-1]['command']}` |"
        )
    total_v = sum(len(r["violations"]) for r in normal)
    lines += [
        "",
        f"Totals: {len(normal)} runs, {sum(r['sections'] for r in normal)} critical sections, "
        f"{sum(r['writes_accepted'] for r in normal)} fenced writes accepted and "
        f"{sum(r['writes_rejected'] for r in normal)} rejected, {total_v} violations, "
        f"{sum(len(r['failed_expectations']) for r in normal)} failed expectations.",
        "",
    ]
    failed = [r for r in normal if r["violations"] or r["failed_expectations"]]
    if failed:
        lines += [
            'Runs that failed (their first finding; what was learnt is under "Findings" in tests/faults/README.md):',
            "",
        ]
        for r in failed:
            what = (r["violations"] or r["failed_expectations"])[0]
            lines.append(f"- {r['run']} ({r['profile']}): {what}")
        lines.append("")

    lines += [
        "## Soak",
        "",
        "`tests/faults/run.sh soak` runs 16 clients (languages rotating) on one lock per backend for 10",
        "minutes each (acquire, probe + fenced write twice, release, again; ttl 10 s, 5 s on Redlock",
        "whose max_ttl is 5 s here). The rows below give the duration that really ran.",
        "",
    ]
    if soak:
        lines += [
            "| backend | clients | minutes run | critical sections | writes accepted / rejected | violations | failed exp. | reproduce |",
            "|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for r in soak:
            minutes = r["profile"].removeprefix("soak-").removesuffix("min")
            cmd = f"tests/faults/run.sh soak --minutes {minutes} --backends {r['backend']}"
            lines.append(
                f"| {r['backend']} | {_langs(r)} | {minutes} | {r['sections']} | {r['writes_accepted']} / "
                f"{r['writes_rejected']} | {len(r['violations'])} | {len(r['failed_expectations'])} | `{cmd}` |"
            )
    else:
        lines.append("No soak has been recorded yet.")
    lines += [
        "",
        "## The broken build",
        "",
        "The same scenarios with a Rust worker built with the test-only feature",
        "`fault-injection-disable-fencing` and `FENCELOCK_FAULT_INJECTION_DISABLE_FENCING=1` (the fence",
        "accepts every token and every lease): the checker must find violations, and CI fails if it does not.",
        "",
    ]
    if broken:
        lines += [
            "| scenario | backend | violations found | properties broken | first violation |",
            "|---|---|---:|---|---|",
        ]
        for r in broken:
            first = r["violations"][0] if r["violations"] else "(none: the checker missed it)"
            found = ", ".join(sorted({x.split(":", 1)[0] for x in r["violations"]}))
            lines.append(
                f"| {r['scenario']} | {r['backend']} | {len(r['violations'])} | {found} | {first.replace('|', '/')} |"
            )
    else:
        lines.append("No broken-build run has been recorded yet.")
    lines += _mutants(normal, plan)
    lines += _ci_time(normal, plan)
    lines += ["", *IN_RUST_TESTS.read_text().rstrip("\n").split("\n")]
    out.write_text("\n".join(lines) + "\n")
    print(
        f"wrote {out}: {len(normal)} runs, {len(soak)} soak runs, {len(broken)} broken-build runs"
    )
    return 0
