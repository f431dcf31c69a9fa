"""The fault-injection suite's orchestrator (stdlib only).

    python3 tests/faults/harness.py short            each scenario x backend once, rotating languages
    python3 tests/faults/harness.py soak [--minutes M] [--clients N] [--backends a,b]
    python3 tests/faults/harness.py one SCENARIO BACKEND [--langs rust,python,node]
    python3 tests/faults/harness.py langs SCENARIO [--langs L]   the languages `one` would run
    python3 tests/faults/harness.py broken           the broken build must make the checker fail
    python3 tests/faults/harness.py record [--invocation ID] [RESULTS.jsonl...]
                                                     fold run summaries into summary.json, write
                                                     tests/FAULTS.md (default: the state folder's)
    python3 tests/faults/harness.py report           regenerate tests/FAULTS.md from summary.json
    python3 tests/faults/harness.py check FILE...    check recorded histories again
    python3 tests/faults/harness.py step NAME --minutes M -- COMMAND...
                                                     one of the soak's steps besides its clients
                                                     (a language suite on every backend, ...):
                                                     runs COMMAND, records its outcome as a run

It runs its own servers (tests/servers.sh with FENCELOCK_SERVERS_DIR and every port moved by
+20000), never the shared ones, and workers in Rust, Python and Node that speak the protocol of
README.md (the machinery is in runs.py, the scenarios in scenarios.py). Every run's history goes
to the state folder; its summary (counts, violations, the command that reproduces it, the commit
and invocation it ran in) is appended to a results file there (results.jsonl), which `record`
folds into the committed summary.json (record.py), from which `report` writes FAULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checker  # noqa: E402
import mutants  # noqa: E402
import record  # noqa: E402
import scenarios_kinds  # noqa: E402, F401  (registers its scenarios)
from runs import HERE, LANGS, ROOT, SERVER_GROUPS, SERVERS_DIR, STATE, Run, servers  # noqa: E402
from scenarios import SCENARIOS  # noqa: E402

# ---------------------------------------------------------------- execution

# Stamped on every summary, so that `record` knows which runs one invocation made (run.sh sets
# one for the short and broken profiles of `run.sh short`) and the commit they ran on.
INVOCATION = os.environ.get("FENCELOCK_FAULTS_INVOCATION") or time.strftime(
    f"%Y%m%dT%H%M%SZ-{os.getpid()}", time.gmtime()
)
COMMIT: Optional[str] = None


def load_plan() -> dict[str, Any]:
    with open(HERE / "scenarios.toml", "rb") as f:
        return tomllib.load(f)


async def run_one(
    name: str,
    backend: str,
    langs: list[str],
    profile: str,
    index: int,
    params: dict[str, Any],
    broken: bool = False,
    rust_worker: Optional[Path] = None,
) -> dict[str, Any]:
    run = Run(name, backend, langs, profile, index, broken=broken)
    if rust_worker is not None:
        run.rust_worker = rust_worker
    t0 = time.monotonic()
    error = None
    try:
        await asyncio.wait_for(SCENARIOS[name](run, params), params.get("timeout_s", 240))
    except Exception as e:  # the run failed to complete: that is a failure, recorded as such
        error = f"{type(e).__name__}: {e}"
        run.expect(False, f"the scenario ran to the end ({error})")
    finally:
        await run.close()
    rows = run.log_rows()
    # The fence's log goes into the history too, so one file is all `harness.py check` needs.
    with open(run.dir / "history.jsonl", "a") as f:
        f.write(
            json.dumps(
                {
                    "rec": "meta",
                    "run": run.id,
                    "scenario": name,
                    "backend": backend,
                    "forgetful": run.forgetful,
                    "broken_build": broken,
                }
            )
            + "\n"
        )
        for row in rows:
            f.write(json.dumps({"rec": "accepted_write", **row}) + "\n")
    verdict = checker.check(run.records, rows, forgetful=run.forgetful)
    failed_expectations = [e["what"] for e in run.expectations if not e["ok"]]
    # Altered copies of the history that the checker must flag (mutants.py): a miss means the
    # run gave the checker too little to judge, which a retry may cure, so it fails as an
    # expectation does.
    judged = mutants.judge(params.get("mutants", []), run.records, rows, run.forgetful)
    failed_expectations += [
        f"the checker catches the history altered by {name} (found: {', '.join(m['found']) or 'nothing'})"
        for name, m in judged.items()
        if not m["caught"]
    ]
    summary = {
        "run": run.id,
        "profile": profile,
        "scenario": name,
        "backend": backend,
        "langs": "+".join(f"{w.name}" for w in run.workers) or "+".join(langs),
        "broken_build": broken,
        "seconds": round(time.monotonic() - t0, 1),
        "sections": verdict.sections,
        "writes_accepted": verdict.writes_accepted,
        "writes_rejected": verdict.writes_rejected,
        "probes": verdict.probes,
        "judged_sections": verdict.critical_sections,
        "mutants": {name: m["found"] for name, m in judged.items()},
        "violations": verdict.violations,
        "expectations": len(run.expectations),
        "failed_expectations": failed_expectations,
        "history": str(run.dir / "history.jsonl"),
        "command": f"tests/faults/run.sh one {name} {backend} --langs {','.join(langs)}",
        "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "invocation": INVOCATION,
    }
    if COMMIT is not None:
        summary["commit"] = COMMIT
    (run.dir / "summary.json").write_text(json.dumps(summary, indent=1))
    status = "ok" if not verdict.violations and not failed_expectations else "FAIL"
    print(
        f"[{status}] {name:22} {backend:12} {summary['langs']:28} {summary['seconds']:6.1f}s "
        f"cs={verdict.sections} acc={verdict.writes_accepted} rej={verdict.writes_rejected} "
        + (f"sections={verdict.critical_sections} " if verdict.critical_sections else "")
        + f"violations={len(verdict.violations)} failed-expectations={len(failed_expectations)}",
        flush=True,
    )
    for v in verdict.violations[:10]:
        print(f"       violation: {v}", flush=True)
    for what in failed_expectations:
        print(f"       expectation failed: {what}", flush=True)
    return summary


def start_backends(backends: list[str]) -> None:
    groups = sorted({g for b in backends for g in SERVER_GROUPS[b]})
    if groups:
        print(f"faults: starting own servers under {SERVERS_DIR}: {' '.join(groups)}", flush=True)
        r = servers("start", *groups, check=False)
        if r.returncode != 0:
            sys.stderr.write(r.stdout + r.stderr)
            raise SystemExit("faults: could not start the servers")


BUNDLE: Optional[Path] = None


def append_results(path: Path, summaries: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for s in summaries:
            f.write(json.dumps(s) + "\n")
    if BUNDLE is not None:
        # The histories themselves, so `harness.py check BUNDLE` can check them again anywhere.
        import gzip

        with gzip.open(BUNDLE, "at") as z:
            for s in summaries:
                for line in open(s["history"]):
                    obj = json.loads(line)
                    obj["_run"] = s["run"]
                    z.write(json.dumps(obj) + "\n")


# What `one` runs when not told, for scenarios open to every language.
DEFAULT_LANGS = ["rust", "python", "node"]


def scenario_langs(spec: dict[str, Any], asked: Optional[str]) -> list[str]:
    """The languages of a `one` run: those asked for (within the scenario's own, when it names
    some), else the scenario's, else the default."""
    allowed = spec.get("langs")
    if asked is None:
        return list(allowed or DEFAULT_LANGS)
    langs = asked.split(",")
    wrong = [lang for lang in langs if lang not in (allowed or LANGS)]
    if wrong:
        raise SystemExit(
            f"faults: this scenario runs with {', '.join(allowed or LANGS)} workers only, "
            f"not {', '.join(wrong)}"
        )
    return langs


def plan_runs(
    plan: dict[str, Any], only: Optional[set[str]] = None
) -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for name, spec in plan["scenario"].items():
        for backend in spec["backends"]:
            if only and backend not in only:
                continue
            params = dict(spec.get("params", {}))
            params.update(spec.get("backend_params", {}).get(backend, {}))
            out.append((name, backend, params))
    return out


# Retries get run indexes of their own, so their folders and lock names never meet the first try's.
RETRY_INDEX = 1000


async def main_short(args: argparse.Namespace) -> int:
    plan = load_plan()
    runs = plan_runs(plan, set(args.backends.split(",")) if args.backends else None)
    if args.scenarios:
        runs = [r for r in runs if r[0] in set(args.scenarios.split(","))]
    start_backends(sorted({b for _, b, _ in runs}))
    # Unless told, the rotation shifts by one every day, so CI puts every language in every role.
    rotate = args.rotate if args.rotate is not None else int(time.time() // 86400) % len(LANGS)
    retried = []
    done: dict[int, list[dict[str, Any]]] = {}

    async def run_and_judge(i: int, name: str, backend: str, params: dict[str, Any]) -> None:
        k = i + rotate
        langs = plan["scenario"][name].get("langs") or [
            LANGS[(k + j) % len(LANGS)] for j in range(len(LANGS))
        ]
        s = await run_one(name, backend, langs, "short", i, params)
        done[i] = [s]
        if s["failed_expectations"] and not s["violations"]:
            # A missed expectation with a clean history is a timing miss (a waiter slower than
            # its margin on a loaded machine), not a broken promise: the same run once more
            # decides. It stays in the results either way; a violation is never retried.
            again = await run_one(name, backend, langs, "short", RETRY_INDEX + i, params)
            again["retry_of"] = s["run"]
            done[i].append(again)
            retried.append((s, again))

    # Each backend has servers of its own, and only its runs restart, stop or cut them: the runs
    # of one backend go one after the other, and PARALLEL backends at a time (the runs mostly
    # wait on timers and servers). The backends with most runs start first.
    by_backend: dict[str, list[tuple[int, str, dict[str, Any]]]] = {}
    for i, (name, backend, params) in enumerate(runs):
        by_backend.setdefault(backend, []).append((i, name, params))
    slots = asyncio.Semaphore(max(1, args.parallel))

    async def backend_runs(backend: str, items: list[tuple[int, str, dict[str, Any]]]) -> None:
        async with slots:
            for i, name, params in items:
                await run_and_judge(i, name, backend, params)

    groups = sorted(by_backend.items(), key=lambda group: -len(group[1]))
    await asyncio.gather(*(backend_runs(backend, items) for backend, items in groups))
    summaries = [s for i in sorted(done) for s in done[i]]
    append_results(Path(args.results), summaries)
    final = [s for s in summaries if "retry_of" not in s and not any(r is s for r, _ in retried)]
    final += [again for _, again in retried]
    bad = [s for s in final if s["violations"] or s["failed_expectations"]]
    lines = [
        f"faults: {len(final)} scenario x backend runs ({len(retried)} retried), "
        f"{sum(s['sections'] for s in summaries)} critical sections, "
        f"{sum(len(s['violations']) for s in summaries)} violations, {len(bad)} failed"
    ]
    for first, again in retried:
        verdict = (
            "failed again"
            if again["failed_expectations"] or again["violations"]
            else "passed on retry"
        )
        lines.append(
            f"faults: RETRIED {first['scenario']}/{first['backend']} ({first['langs']}): "
            f"{'; '.join(first['failed_expectations'])} -> {verdict}"
        )
    for s in bad:
        lines.append(
            f"faults: FAILED {s['scenario']}/{s['backend']} ({s['langs']}), reproduce: {s['command']}"
        )
        lines += [f"       {what}" for what in s["violations"][:5] + s["failed_expectations"][:5]]
    print("\n".join(lines), flush=True)
    # run.sh prints it again at its very end, where a truncated CI log still shows it.
    (STATE / "short-summary.txt").write_text("\n".join(lines) + "\n")
    return 1 if bad else 0


async def main_one(args: argparse.Namespace) -> int:
    plan = load_plan()
    spec = plan["scenario"][args.scenario]
    params = dict(spec.get("params", {}))
    params.update(spec.get("backend_params", {}).get(args.backend, {}))
    langs = scenario_langs(spec, args.langs)
    start_backends([args.backend])
    s = await run_one(args.scenario, args.backend, langs, "one", 0, params)
    append_results(Path(args.results), [s])
    return 1 if s["violations"] or s["failed_expectations"] else 0


async def main_soak(args: argparse.Namespace) -> int:
    backends = args.backends.split(",")
    start_backends(backends)
    summaries = []
    for i, backend in enumerate(backends):
        langs = [LANGS[(i + j) % len(LANGS)] for j in range(len(LANGS))]
        ttl_ms = 5000 if backend == "redlock" else 10000  # Redlock's max_ttl here is 5 s
        params = {
            "clients": args.clients,
            "duration_s": args.minutes * 60,
            "ttl_ms": ttl_ms,
            "writes": 2,
            "timeout_s": args.minutes * 60 + 300,
        }
        summaries.append(
            await run_one("soak", backend, langs, f"soak-{args.minutes:g}min", i, params)
        )
        append_results(Path(args.results), summaries[-1:])
    return 1 if any(s["violations"] or s["failed_expectations"] for s in summaries) else 0


# The longest one soak step may take: each language's suite on every backend takes 2-5 minutes.
STEP_LIMIT_S = 45 * 60


def main_step(args: argparse.Namespace) -> int:
    """Runs one of the soak's steps (a command, such as a language suite on every backend) and
    appends its outcome as a run of the soak's invocation, so that the soak's record
    (record.py: `steps`) says which commit every part of the soak passed on."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise SystemExit("faults: step: no command given")
    print(f"== faults: soak step {args.name}: {shlex.join(command)}", flush=True)
    t0 = time.monotonic()
    # Through tests/step.sh, as CI runs its steps: SIGINT and SIGQUIT at their defaults (a soak
    # started as a background job of a shell without job control has them ignored, and every
    # process of the step would inherit that: the Ctrl-C tests hung), and a step that hangs
    # ends after STEP_LIMIT_S with what was running, instead of holding the soak for good.
    code = subprocess.run(
        ["bash", str(ROOT / "tests" / "step.sh"), str(STEP_LIMIT_S), *command], cwd=ROOT
    ).returncode
    summary = {
        "run": time.strftime(f"step-{args.name}-%Y%m%dT%H%M%S-0", time.gmtime()),
        "profile": f"soak-{args.minutes:g}min",
        "scenario": record.STEP,
        "backend": args.name,
        "langs": "",
        "seconds": round(time.monotonic() - t0, 1),
        "violations": [],
        "failed_expectations": [] if code == 0 else [f"the step exited with status {code}"],
        "command": shlex.join(command),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "invocation": INVOCATION,
    }
    if COMMIT is not None:
        summary["commit"] = COMMIT
    append_results(Path(args.results), [summary])
    print(
        f"[{'ok' if code == 0 else 'FAIL'}] soak step {args.name} in {summary['seconds']:.0f}s",
        flush=True,
    )
    return 0 if code == 0 else 1


async def main_broken(args: argparse.Namespace) -> int:
    """Runs SIGSTOP and the Redis restart with the broken Rust worker (fencing off): the checker
    must find violations in each; exit 0 only if it does."""
    exe = ROOT / "target/faults-workers/fencelock-faults-worker-broken"
    plan = load_plan()
    start_backends(["sqlite", "redis"])
    caught = 0
    cases = [("sigstop", "sqlite"), ("server-restart", "redis")]
    summaries = []
    for i, (name, backend) in enumerate(cases):
        spec = plan["scenario"][name]
        params = dict(spec.get("params", {}))
        params.update(spec.get("backend_params", {}).get(backend, {}))
        s = await run_one(
            name,
            backend,
            ["rust", "rust", "rust"],
            "broken",
            i,
            params,
            broken=True,
            rust_worker=exe,
        )
        summaries.append(s)
        if s["violations"]:
            caught += 1
            print(
                f"faults: as it must, the checker caught the broken build in {name}/{backend}: {s['violations'][0]}"
            )
        else:
            print(
                f"faults: ERROR: the checker found nothing wrong with the broken build in {name}/{backend}"
            )
    append_results(Path(args.results), summaries)
    return 0 if caught == len(cases) else 1


def check_files(paths: list[str]) -> int:
    """Checks recorded histories again (history.jsonl files, or .jsonl.gz bundles of several)."""
    import gzip

    runs: dict[str, list[dict[str, Any]]] = {}
    for p in paths:
        opener = gzip.open if p.endswith(".gz") else open
        with opener(p, "rt") as f:
            for line in f:
                obj = json.loads(line)
                runs.setdefault(obj.pop("_run", p), []).append(obj)
    bad = 0
    for run_id, recs in runs.items():
        meta = next((r for r in recs if r.get("rec") == "meta"), {})
        rows = [r for r in recs if r.get("rec") == "accepted_write"]
        v = checker.check(recs, rows, forgetful=bool(meta.get("forgetful")))
        expect_fail = [r["what"] for r in recs if r.get("rec") == "expect" and not r["ok"]]
        ok = not v.violations and not expect_fail
        bad += not ok
        print(
            f"[{'ok' if ok else 'FAIL'}] {meta.get('run', run_id)}: {v.sections} critical sections, "
            f"{v.writes_accepted} writes accepted, {v.writes_rejected} rejected, {len(v.violations)} violations"
            + (" (broken build)" if meta.get("broken_build") else "")
        )
        for x in v.violations[:5] + expect_fail[:5]:
            print(f"       {x}")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--results", default=str(STATE / "results.jsonl"), help="results file to append to"
    )
    ap.add_argument("--bundle", help="also append every run's history to this .jsonl.gz")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for cmd in ("short", "langs-short"):  # langs-short: the languages `short` would use
        s = sub.add_parser(cmd)
        s.add_argument("--backends")
        s.add_argument("--scenarios")
        s.add_argument(
            "--rotate", type=int, help="shift the language rotation (default: the day's)"
        )
        s.add_argument(
            "--parallel",
            type=int,
            default=int(os.environ.get("FENCELOCK_FAULTS_PARALLEL", "2")),
            help="backends whose runs go at once (default 2, or FENCELOCK_FAULTS_PARALLEL)",
        )
    o = sub.add_parser("one")
    o.add_argument("scenario")
    o.add_argument("backend")
    o.add_argument("--langs", help="default: the scenario's languages, else rust,python,node")
    lg = sub.add_parser("langs", help="the languages a `one` run would use (for run.sh's build)")
    lg.add_argument("scenario")
    lg.add_argument("backend", nargs="?")
    lg.add_argument("--langs")
    k = sub.add_parser("soak")
    k.add_argument("--minutes", type=float, default=3)
    k.add_argument("--clients", type=int, default=16)
    k.add_argument("--backends", default="redis,redlock,zookeeper,postgres,mariadb,sqlite")
    sub.add_parser("broken")
    st = sub.add_parser("step", help="run one of the soak's steps and record its outcome")
    st.add_argument("name")
    st.add_argument("--minutes", type=float, required=True, help="the soak's length per backend")
    st.add_argument("command", nargs="+", help="after --")
    c = sub.add_parser("check", help="check recorded histories again")
    c.add_argument("files", nargs="+")
    rp = sub.add_parser("record", help="fold run summaries into summary.json, write FAULTS.md")
    rp.add_argument("--invocation", help="only the runs of this invocation")
    rp.add_argument("--commit", help="for runs that carry no commit (default: HEAD)")
    rp.add_argument("--date", help="for runs that carry no date (default: today)")
    rp.add_argument("--summary", default=str(record.SUMMARY))
    rp.add_argument("--out", default=str(ROOT / "tests/FAULTS.md"))
    rp.add_argument("files", nargs="*", default=[str(STATE / "results.jsonl")])
    r = sub.add_parser("report", help="regenerate FAULTS.md from summary.json")
    r.add_argument("--summary", default=str(record.SUMMARY))
    r.add_argument("--out", default=str(ROOT / "tests/FAULTS.md"))
    args = ap.parse_args()
    global BUNDLE, COMMIT
    BUNDLE = Path(args.bundle) if args.bundle else None
    if args.cmd in ("record", "report"):
        import report

        if args.cmd == "record":
            code = record.record(
                args.files, Path(args.summary), args.invocation, args.commit, args.date
            )
            if code:
                return code
        return report.write(Path(args.summary), Path(args.out))
    if args.cmd == "check":
        return check_files(args.files)
    if args.cmd == "langs":
        print(",".join(scenario_langs(load_plan()["scenario"][args.scenario], args.langs)))
        return 0
    if args.cmd == "langs-short":
        plan = load_plan()
        runs = plan_runs(plan, set(args.backends.split(",")) if args.backends else None)
        if args.scenarios:
            runs = [r for r in runs if r[0] in set(args.scenarios.split(","))]
        used = {lang for name, _, _ in runs for lang in plan["scenario"][name].get("langs", LANGS)}
        print(",".join(lang for lang in LANGS if lang in used or lang == "rust"))
        return 0
    if args.cmd == "step":
        COMMIT = record.git_commit()
        return main_step(args)
    fn = {"short": main_short, "one": main_one, "soak": main_soak, "broken": main_broken}[args.cmd]
    COMMIT = record.git_commit()  # before any run: what the runs ran on
    return asyncio.run(fn(args))


if __name__ == "__main__":
    sys.exit(main())
