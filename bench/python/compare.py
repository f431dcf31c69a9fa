"""fencelock from Python against the locks Python users would otherwise pick, in one run.

    bench/python/run.sh [--suite locks|shared] [--only WORD ...] [--seconds S] [--runs N] [--write]

The default suite, "locks", compares mutexes, as follows.

For every contestant (contestants.py), on the same servers, one after the other:
- uncontended: one process acquires and releases a lock nobody else wants, for S seconds;
  cycles/s and the p50/p99 of one acquire+release;
- contended: 8 processes share one lock for S seconds. Each takes it, works 2 ms inside
  (--hold-ms), releases it, then works 1 ms elsewhere (--think-ms) before asking again, so
  while one holds, the others are waiting: the handoff measures how fast a waiter learns that
  the lock is free. Reported: critical sections/s, the p50 handoff (from the moment a holder
  starts to release until another process holds the lock) and the share of sections that went
  to another process than the previous one (the rest went back to the process that just
  released it). Every run checks exclusion from the timestamps: overlaps must be 0.
- handoff: 2 processes take turns strictly (one releases only to a waiter already parked in
  acquire, and asks again only once the other holds it), each holding 2 ms: the p50 time from
  the start of a release to the waiter holding the lock. An unfair lock cannot hide its
  wake-up latency here behind the releasing process taking the lock back.

Ratios compare fencelock with the other contestants of its family (Redis, Redlock, ZooKeeper):
throughput as fencelock / other, handoff as other / fencelock, so above 1.00x means fencelock
is faster. No speed is asserted anywhere: this prints and records.

The suite "shared" compares semaphores (3 permits) and read locks (contestants.shared_specs), in
--runs runs (default 4); in each run every contestant takes its turn, so all of them see the
machine's load of that stretch of time. Per contestant and run:
- uncontended: one process takes a permit (or the read lock) nobody else wants and gives it
  back, for S seconds: cycles/s, p50/p99 of one cycle;
- contended: 8 processes for S seconds. On a semaphore each takes a permit, works 2 ms inside
  (--hold-ms), gives it back and works 1 ms elsewhere (--think-ms), so about 5 of them wait at
  any moment. On a read lock the 8 readers cycle back to back (nothing inside, nothing between),
  so it measures how read cycles run side by side. Reported: sections/s, the p50/p99 wait
  (from asking to holding) and the most holders seen at once, from the timestamps; on a
  semaphore more than 3 at once is counted as "over the limit" and must be 0.
Ratios are per run (fencelock / rival: cycles/s, sections/s, and rival / fencelock for the wait
p50) and their median over the runs; every run's ratios are listed with the load average.

The suite "cycle" measures only the uncontended cycle on one Redis master (contestants.cycle_specs),
in --runs alternating runs: fencelock (release awaited, and pipelined) against redis-py's Lock on
a master without replicas, beside the limit of two round trips that `redis-benchmark` (one
connection, PING) measures on that master in the same run, and fencelock on the test server with
a replica, where it waits for the replica after each acquire.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contestants  # noqa: E402
from contestants import Spec  # noqa: E402

CONTENDERS = 8
MARKER_BEGIN = "<!-- python-compare:begin -->"
MARKER_END = "<!-- python-compare:end -->"
SHARED_MARKER_BEGIN = "<!-- python-shared:begin -->"
SHARED_MARKER_END = "<!-- python-shared:end -->"
CYCLE_MARKER_BEGIN = "<!-- python-cycle:begin -->"
CYCLE_MARKER_END = "<!-- python-cycle:end -->"


@dataclass
class Uncontended:
    cycles_per_s: float
    p50_ms: float
    p99_ms: float


@dataclass
class Contended:
    sections_per_s: float
    handoff_p50_ms: Optional[float]
    to_other_share: float
    sections: int
    overlaps: int


@dataclass
class Handoff:
    p50_ms: float
    p99_ms: float
    handoffs: int


@dataclass
class Result:
    spec: Spec
    uncontended: Optional[Uncontended] = None
    contended: Optional[Contended] = None
    handoff: Optional[Handoff] = None
    error: Optional[str] = None
    notes: List[str] = field(default_factory=list)


def percentile(sorted_values: List[float], fraction: float) -> float:
    index = min(len(sorted_values) - 1, int(round(fraction * (len(sorted_values) - 1))))
    return sorted_values[index]


def unique_name(kind: str) -> str:
    return f"bench-{kind}-{uuid.uuid4().hex[:12]}"


def run_uncontended(spec: Spec, seconds: float) -> Uncontended:
    client = contestants.build(spec)
    try:
        name = unique_name("solo")
        warmup_until = time.monotonic() + min(1.0, seconds / 3)
        while time.monotonic() < warmup_until:
            client.release(client.acquire(name))
        latencies: List[float] = []
        started = time.monotonic()
        deadline = started + seconds
        while True:
            before = time.perf_counter()
            client.release(client.acquire(name))
            latencies.append(time.perf_counter() - before)
            if time.monotonic() >= deadline:
                break
        elapsed = time.monotonic() - started
    finally:
        client.close()
    latencies.sort()
    return Uncontended(
        cycles_per_s=len(latencies) / elapsed,
        p50_ms=percentile(latencies, 0.50) * 1e3,
        p99_ms=percentile(latencies, 0.99) * 1e3,
    )


def contender(
    spec: Spec,
    name: str,
    start_at: float,
    stop_at: float,
    hold: float,
    think: float,
    out: "mp.Queue",
) -> None:
    """One of the 8 processes: (acquired, release started) per section, on CLOCK_MONOTONIC,
    which every process on the machine shares."""
    sections: List[Tuple[float, float]] = []
    try:
        client = contestants.build(spec)
        # Connecting is not measured: wait for the common start.
        while time.monotonic() < start_at:
            time.sleep(0.001)
        while time.monotonic() < stop_at:
            handle = client.acquire(name)
            acquired = time.monotonic()
            time.sleep(hold)
            releasing = time.monotonic()
            client.release(handle)
            sections.append((acquired, releasing))
            time.sleep(think)
        client.close()
        out.put((os.getpid(), sections, None))
    except BaseException as error:  # reported by the parent, never swallowed
        out.put((os.getpid(), sections, f"{type(error).__name__}: {error}"))


# (acquired, releasing, process), or (asked, acquired, releasing, process) in the shared suite.
Timeline = List[Tuple[float, ...]]


def run_processes(
    context: "mp.context.SpawnContext",
    target: object,
    arguments: List[tuple],
    out: "mp.Queue",
    seconds: float,
) -> Timeline:
    """Starts one process per argument tuple and merges their sections ((acquired, releasing),
    or (asked, acquired, releasing) in the shared suite), each tagged with its process, sorted;
    raises if any process failed."""
    workers = [context.Process(target=target, args=args) for args in arguments]
    for worker in workers:
        worker.start()
    timeline: Timeline = []
    errors: List[str] = []
    for _ in workers:
        # A waiter of a slow lock may finish a poll interval late; bound it all the same.
        who, sections, error = out.get(timeout=seconds + 120)
        timeline.extend((*section, who) for section in sections)
        if error:
            errors.append(error)
    for worker in workers:
        worker.join(timeout=30)
    if errors:
        raise RuntimeError("; ".join(sorted(set(errors))))
    timeline.sort()
    return timeline


def handoff_gaps(timeline: Timeline) -> List[float]:
    """Release-to-acquire times of the sections that went to another process, sorted."""
    return sorted(
        following[0] - previous[1]
        for previous, following in zip(timeline, timeline[1:])
        if following[2] != previous[2]
    )


def run_contended(spec: Spec, seconds: float, hold: float, think: float) -> Contended:
    context = mp.get_context("spawn")
    out: "mp.Queue" = context.Queue()
    name = unique_name("shared")
    # Spawned interpreters take a while to import and connect; all start together.
    start_at = time.monotonic() + 4.0
    stop_at = start_at + seconds
    arguments = [(spec, name, start_at, stop_at, hold, think, out) for _ in range(CONTENDERS)]
    timeline = run_processes(context, contender, arguments, out, seconds)
    overlaps = sum(
        1 for previous, following in zip(timeline, timeline[1:]) if following[0] < previous[1]
    )
    handoffs = handoff_gaps(timeline)
    pairs = max(1, len(timeline) - 1)
    return Contended(
        sections_per_s=len(timeline) / seconds,
        handoff_p50_ms=percentile(handoffs, 0.5) * 1e3 if handoffs else None,
        to_other_share=len(handoffs) / pairs,
        sections=len(timeline),
        overlaps=overlaps,
    )


def alternate(
    spec: Spec,
    me: int,
    name: str,
    start_at: float,
    stop_at: float,
    hold: float,
    last_holder: "mp.sharedctypes.Synchronized[int]",
    out: "mp.Queue",
) -> None:
    """One of the two strictly alternating processes: asks for the lock only after the other
    one took it since this one's last turn, so every release goes to a parked waiter."""
    sections: List[Tuple[float, float]] = []
    try:
        client = contestants.build(spec)
        while time.monotonic() < start_at:
            time.sleep(0.001)
        while time.monotonic() < stop_at:
            while last_holder.value == me:
                if time.monotonic() >= stop_at:
                    break
                time.sleep(0.0001)
            else:
                handle = client.acquire(name)
                acquired = time.monotonic()
                last_holder.value = me
                time.sleep(hold)
                releasing = time.monotonic()
                client.release(handle)
                sections.append((acquired, releasing))
                continue
            break
        client.close()
        out.put((me, sections, None))
    except BaseException as error:
        out.put((me, sections, f"{type(error).__name__}: {error}"))


def run_handoff(spec: Spec, seconds: float, hold: float) -> Handoff:
    context = mp.get_context("spawn")
    out: "mp.Queue" = context.Queue()
    last_holder = context.Value("i", -1)
    name = unique_name("handoff")
    start_at = time.monotonic() + 4.0
    stop_at = start_at + seconds
    arguments = [(spec, me, name, start_at, stop_at, hold, last_holder, out) for me in range(2)]
    gaps = handoff_gaps(run_processes(context, alternate, arguments, out, seconds))
    if not gaps:
        raise RuntimeError("no handoff happened")
    return Handoff(percentile(gaps, 0.5) * 1e3, percentile(gaps, 0.99) * 1e3, len(gaps))


def measure(spec: Spec, seconds: float, hold: float, think: float) -> Result:
    result = Result(spec)
    try:
        result.uncontended = run_uncontended(spec, seconds)
        result.contended = run_contended(spec, seconds, hold, think)
        result.handoff = run_handoff(spec, seconds, hold)
    except Exception as error:  # one library failing must not hide the others' numbers
        result.error = f"{type(error).__name__}: {error}"
    return result


def ratio(numerator: Optional[float], denominator: Optional[float]) -> str:
    if not numerator or not denominator:
        return "-"
    return f"{numerator / denominator:.2f}x"


def fmt(value: Optional[float], digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(results: List[Result]) -> str:
    """One row per contestant. A rival's last two columns compare each fencelock contestant of
    its family with it (in table order, e.g. "awaited release / pipelined release")."""
    lines = [
        "| contestant | uncontended cycles/s | p50 ms | p99 ms | 8 processes: sections/s "
        "| to another process | overlaps | alternating handoff p50 ms | p99 ms "
        "| fencelock's uncontended ratio | fencelock's handoff ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ours_by_family: Dict[str, List[Result]] = {}
    for result in results:
        if result.spec.is_fencelock and not result.error:
            ours_by_family.setdefault(result.spec.family, []).append(result)
    for result in results:
        spec = result.spec
        if result.error:
            lines.append(f"| {spec.label} | failed: {result.error} ||||||||||")
            continue
        solo, shared, handoff = result.uncontended, result.contended, result.handoff
        assert solo is not None and shared is not None and handoff is not None
        ours = [] if spec.is_fencelock else ours_by_family.get(spec.family, [])
        versus_solo = (
            " / ".join(
                ratio(o.uncontended.cycles_per_s, solo.cycles_per_s) for o in ours if o.uncontended
            )
            or "-"
        )
        versus_handoff = (
            " / ".join(ratio(handoff.p50_ms, o.handoff.p50_ms) for o in ours if o.handoff) or "-"
        )
        lines.append(
            f"| {spec.label} | {solo.cycles_per_s:.0f} | {solo.p50_ms:.3f} | {solo.p99_ms:.3f} "
            f"| {shared.sections_per_s:.0f} | {shared.to_other_share * 100:.0f}% "
            f"| {shared.overlaps} | {handoff.p50_ms:.3f} | {handoff.p99_ms:.3f} "
            f"| {versus_solo} | {versus_handoff} |"
        )
    return "\n".join(lines)


def versions() -> str:
    from importlib import metadata

    found = []
    for package in ["fencelock", "redis", "python-redis-lock", "pottery", "kazoo"]:
        try:
            found.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            found.append(f"{package} (not installed)")
    return ", ".join(found)


def write_results(
    path: Path, section: str, begin: str = MARKER_BEGIN, end: str = MARKER_END
) -> None:
    text = path.read_text()
    block = f"{begin}\n{section}\n{end}"
    if begin in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


# The shared suite: semaphores and read locks.


@dataclass
class SharedContended:
    sections_per_s: float
    wait_p50_ms: float
    wait_p99_ms: float
    most_holders: int
    over_limit: int
    sections: int


@dataclass
class SharedResult:
    spec: Spec
    uncontended: Optional[Uncontended] = None
    contended: Optional[SharedContended] = None
    error: Optional[str] = None


def sharer(
    spec: Spec,
    name: str,
    start_at: float,
    stop_at: float,
    hold: float,
    think: float,
    out: "mp.Queue",
) -> None:
    """One of the 8 processes on a semaphore or read lock: (asked, acquired, releasing) per
    section, on CLOCK_MONOTONIC. The section [acquired, releasing] lies inside the real hold
    (acquire has returned, release not yet called), so overlaps seen here are real."""
    sections: List[Tuple[float, float, float]] = []
    try:
        client = contestants.build(spec)
        while time.monotonic() < start_at:
            time.sleep(0.001)
        while time.monotonic() < stop_at:
            asked = time.monotonic()
            handle = client.acquire(name)
            acquired = time.monotonic()
            if hold:
                time.sleep(hold)
            releasing = time.monotonic()
            client.release(handle)
            sections.append((asked, acquired, releasing))
            if think:
                time.sleep(think)
        client.close()
        out.put((os.getpid(), sections, None))
    except BaseException as error:  # reported by the parent, never swallowed
        out.put((os.getpid(), sections, f"{type(error).__name__}: {error}"))


def most_at_once(timeline: Timeline, limit: int) -> Tuple[int, int]:
    """The most sections of an (asked, acquired, releasing, process) timeline held at once, and
    how many sections began while `limit` others were held (0 when there is no limit)."""
    events = sorted(
        [(acquired, 1) for _, acquired, _, _ in timeline]
        + [(releasing, -1) for _, _, releasing, _ in timeline]
    )
    holders = most = over = 0
    for _, change in events:  # at equal times a release (-1) sorts before an acquire
        holders += change
        most = max(most, holders)
        if change > 0 and limit and holders > limit:
            over += 1
    return most, over


def run_shared_contended(spec: Spec, seconds: float, hold: float, think: float) -> SharedContended:
    context = mp.get_context("spawn")
    out: "mp.Queue" = context.Queue()
    name = unique_name("shared")
    if spec.kind == "read":
        hold = think = 0.0  # readers back to back
    start_at = time.monotonic() + 4.0
    stop_at = start_at + seconds
    arguments = [(spec, name, start_at, stop_at, hold, think, out) for _ in range(CONTENDERS)]
    timeline = run_processes(context, sharer, arguments, out, seconds)
    if not timeline:
        raise RuntimeError("no section happened")
    waits = sorted(acquired - asked for asked, acquired, _, _ in timeline)
    most, over = most_at_once(timeline, spec.permits if spec.kind == "semaphore" else 0)
    return SharedContended(
        sections_per_s=len(timeline) / seconds,
        wait_p50_ms=percentile(waits, 0.5) * 1e3,
        wait_p99_ms=percentile(waits, 0.99) * 1e3,
        most_holders=most,
        over_limit=over,
        sections=len(timeline),
    )


def measure_shared(spec: Spec, seconds: float, hold: float, think: float) -> SharedResult:
    result = SharedResult(spec)
    try:
        result.uncontended = run_uncontended(spec, seconds)
        result.contended = run_shared_contended(spec, seconds, hold, think)
    except Exception as error:  # one library failing must not hide the others' numbers
        result.error = f"{type(error).__name__}: {error}"
    return result


def median(values: List[float]) -> Optional[float]:
    ordered = sorted(values)
    if not ordered:
        return None
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def rivals_of(specs: List[Spec]) -> List[Tuple[Spec, Spec]]:
    """(fencelock contestant, rival) pairs: same family (server) and kind."""
    return [
        (ours, theirs)
        for theirs in specs
        if not theirs.is_fencelock
        for ours in specs
        if ours.is_fencelock and (ours.family, ours.kind) == (theirs.family, theirs.kind)
    ]


# (column heading, value of one run's pair) for the ratio columns of the shared suite.
SharedRatio = Tuple[str, Callable[[SharedResult, SharedResult], Optional[float]]]


def _over(numerator: Optional[float], denominator: Optional[float]) -> Optional[float]:
    return numerator / denominator if numerator and denominator else None


SHARED_RATIOS: List[SharedRatio] = [
    (
        "uncontended cycles/s",
        lambda o, t: _over(
            o.uncontended and o.uncontended.cycles_per_s,
            t.uncontended and t.uncontended.cycles_per_s,
        ),
    ),
    (
        "contended sections/s",
        lambda o, t: _over(
            o.contended and o.contended.sections_per_s, t.contended and t.contended.sections_per_s
        ),
    ),
    (
        "contended wait p50 (theirs / ours)",
        lambda o, t: _over(
            t.contended and t.contended.wait_p50_ms, o.contended and o.contended.wait_p50_ms
        ),
    ),
]


def shared_report(
    specs: List[Spec], runs: List[Dict[str, SharedResult]], loads: List[Tuple[float, float]]
) -> str:
    """Two tables: each contestant's medians over the runs with fencelock's median ratios, then
    every run's ratios and load average."""

    def med(label: str, pick: Callable[[SharedResult], Optional[float]]) -> Optional[float]:
        values = [pick(run[label]) for run in runs if not run[label].error]
        return median([v for v in values if v is not None])

    pairs = rivals_of(specs)
    lines = [
        "| contestant | kind | uncontended cycles/s | p50 ms | p99 ms | contended sections/s "
        "| wait p50 ms | wait p99 ms | most holders at once | over the limit | failed runs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for spec in specs:
        failed = [run[spec.label].error for run in runs if run[spec.label].error]
        kind = f"semaphore of {spec.permits}" if spec.kind == "semaphore" else "read lock"
        solo = [run[spec.label].uncontended for run in runs if run[spec.label].uncontended]
        shared = [run[spec.label].contended for run in runs if run[spec.label].contended]
        most = max((c.most_holders for c in shared), default=None)
        over = sum(c.over_limit for c in shared) if spec.kind == "semaphore" else None
        lines.append(
            f"| {spec.label} | {kind} "
            f"| {fmt(med(spec.label, lambda r: r.uncontended and r.uncontended.cycles_per_s), 0)} "
            f"| {fmt(median([u.p50_ms for u in solo]), 3)} "
            f"| {fmt(median([u.p99_ms for u in solo]), 3)} "
            f"| {fmt(median([c.sections_per_s for c in shared]), 0)} "
            f"| {fmt(median([c.wait_p50_ms for c in shared]), 3)} "
            f"| {fmt(median([c.wait_p99_ms for c in shared]), 3)} "
            f"| {'-' if most is None else most} | {'-' if over is None else over} "
            f"| {len(failed)}{': ' + failed[0] if failed else ''} |"
        )
    lines += [
        "",
        "| fencelock / rival | ratio of | "
        + " | ".join(f"run {i + 1}" for i in range(len(runs)))
        + " | median |",
        "|---|---|" + "---|" * (len(runs) + 1),
    ]
    for ours, theirs in pairs:
        for heading, value in SHARED_RATIOS:
            per_run = [value(run[ours.label], run[theirs.label]) for run in runs]
            cells = " | ".join("-" if v is None else f"{v:.2f}x" for v in per_run)
            middle = median([v for v in per_run if v is not None])
            lines.append(
                f"| {ours.label} / {theirs.label} | {heading} | {cells} | **{fmt(middle)}x** |"
            )
    lines.append(
        "| load average (1 min) before / after the run | | "
        + " | ".join(f"{before:.2f} / {after:.2f}" for before, after in loads)
        + " | |"
    )
    return "\n".join(lines)


def main_shared(args: argparse.Namespace) -> int:
    specs = contestants.shared_specs(dict(os.environ), args.only)
    runs: List[Dict[str, SharedResult]] = []
    loads: List[Tuple[float, float]] = []
    for run in range(args.runs):
        before = os.getloadavg()[0]
        results: Dict[str, SharedResult] = {}
        for spec in specs:
            print(
                f"run {run + 1}/{args.runs}: measuring {spec.label} "
                f"(load {os.getloadavg()[0]:.2f}) ...",
                file=sys.stderr,
                flush=True,
            )
            result = measure_shared(spec, args.seconds, args.hold_ms / 1e3, args.think_ms / 1e3)
            if result.error:
                print(f"  failed: {result.error}", file=sys.stderr, flush=True)
            else:
                assert result.uncontended is not None and result.contended is not None
                print(
                    f"  uncontended {result.uncontended.cycles_per_s:.0f}/s "
                    f"(p50 {result.uncontended.p50_ms:.3f} ms); contended "
                    f"{result.contended.sections_per_s:.0f}/s, wait p50 "
                    f"{result.contended.wait_p50_ms:.3f} ms, most at once "
                    f"{result.contended.most_holders}, over the limit "
                    f"{result.contended.over_limit}",
                    file=sys.stderr,
                    flush=True,
                )
            results[spec.label] = result
        runs.append(results)
        loads.append((before, os.getloadavg()[0]))

    report = "\n".join(
        [
            shared_report(specs, runs, loads),
            "",
            f"Command: `{args.command}` ({args.seconds:g} s per measurement; "
            f"{CONTENDERS} processes; semaphores of {contestants.PERMITS} permits with "
            f"{args.hold_ms:g} ms inside and {args.think_ms:g} ms between sections; readers back "
            f"to back). Versions: {versions()}. Python {sys.version.split()[0]}; "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        ]
    )
    print(report)
    if args.write:
        write_results(args.write, report, SHARED_MARKER_BEGIN, SHARED_MARKER_END)
    failed = any(result.error for run in runs for result in run.values())
    broken = [
        label
        for run in runs
        for label, result in run.items()
        if result.contended and result.contended.over_limit
    ]
    for label in sorted(set(broken)):
        print(f"PERMIT LIMIT VIOLATED: {label}", file=sys.stderr)
    return 1 if failed or broken else 0


def round_trip_limit(url: str, requests: int = 20000) -> Optional[float]:
    """Cycles/s of two round trips each, from `redis-benchmark -c 1` PINGs on the server of
    `url`; None when redis-benchmark is missing."""
    import re
    import shutil
    import subprocess

    if shutil.which("redis-benchmark") is None:
        return None
    address = url.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0]
    host, _, port = address.rpartition(":")
    out = subprocess.run(
        [
            "redis-benchmark",
            "-h",
            host,
            "-p",
            port,
            "-c",
            "1",
            "-n",
            str(requests),
            "-t",
            "ping_mbulk",
            "-q",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.findall(r"([0-9.]+) requests per second", out)
    return float(found[-1]) / 2 if found else None


def main_cycle(args: argparse.Namespace) -> int:
    specs = contestants.cycle_specs(dict(os.environ), args.only)
    plain = specs[0].url
    rows: List[Dict[str, float]] = []
    for run in range(args.runs):
        before = os.getloadavg()[0]
        row: Dict[str, float] = {}
        limit = round_trip_limit(plain)
        if limit:
            row["two round trips (redis-benchmark)"] = limit
        for spec in specs:
            row[spec.label] = run_uncontended(spec, args.seconds).cycles_per_s
        row["load"] = (before + os.getloadavg()[0]) / 2
        print(f"run {run + 1}/{args.runs}: {row}", file=sys.stderr, flush=True)
        rows.append(row)

    rival = "redis-py Lock"
    limit_label = "two round trips (redis-benchmark)"
    ours = [spec.label for spec in specs if spec.is_fencelock and spec.family == "redis"]
    lines = [
        "| run | load | limit cycles/s | redis-py cycles/s | "
        + " | ".join(f"{label} cycles/s | vs redis-py | of the limit" for label in ours)
        + " | "
        + " | ".join(f"{s.label} cycles/s" for s in specs if s.family != "redis")
        + " |",
        "|" + "---|" * (4 + 3 * len(ours) + sum(1 for s in specs if s.family != "redis")),
    ]

    def cell(value: Optional[float], digits: int = 0, suffix: str = "") -> str:
        return "-" if value is None else f"{value:.{digits}f}{suffix}"

    ratios: Dict[str, List[float]] = {label: [] for label in ours}
    shares: Dict[str, List[float]] = {label: [] for label in ours}
    for number, row in enumerate(rows, 1):
        limit = row.get(limit_label)
        parts = [str(number), f"{row['load']:.1f}", cell(limit), cell(row.get(rival))]
        for label in ours:
            mine = row.get(label)
            versus = mine / row[rival] if mine and row.get(rival) else None
            share = mine / limit if mine and limit else None
            if versus:
                ratios[label].append(versus)
            if share:
                shares[label].append(share)
            parts += [cell(mine), cell(versus, 2, "x"), cell(share, 2)]
        parts += [cell(row.get(s.label)) for s in specs if s.family != "redis"]
        lines.append("| " + " | ".join(parts) + " |")
    rival_shares = [
        row[rival] / row[limit_label] for row in rows if row.get(rival) and row.get(limit_label)
    ]
    summary = [
        f"Medians over {len(rows)} runs: "
        + "; ".join(
            f"{label} {cell(median(ratios[label]), 2, 'x')} redis-py's Lock, "
            f"{cell(median(shares[label]), 2)} of the two-round-trip limit"
            for label in ours
        )
        + f"; redis-py's Lock {cell(median(rival_shares), 2)} of the limit."
    ]
    report = "\n".join(
        lines
        + [""]
        + summary
        + [
            "",
            f"Command: `{args.command}` ({args.seconds:g} s per measurement, contestants in turn "
            f"within each run). Versions: {versions()}. Python {sys.version.split()[0]}; "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        ]
    )
    print(report)
    if args.write:
        write_results(args.write, report, CYCLE_MARKER_BEGIN, CYCLE_MARKER_END)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement (default 3)")
    parser.add_argument("--only", nargs="*", help="contestants whose label contains a word")
    parser.add_argument("--hold-ms", type=float, default=2.0, help="work inside each section")
    parser.add_argument("--think-ms", type=float, default=1.0, help="work between sections")
    parser.add_argument("--write", type=Path, help="replace the comparison section of this file")
    parser.add_argument("--command", default=None, help="shown in the report")
    parser.add_argument(
        "--suite",
        choices=["locks", "shared", "cycle"],
        default="locks",
        help="locks: mutexes; shared: semaphores and read locks; cycle: Redis's uncontended cycle",
    )
    parser.add_argument(
        "--runs", type=int, default=4, help="runs of the shared and cycle suites (4)"
    )
    args = parser.parse_args(argv)
    if args.command is None:
        args.command = "bench/python/run.sh"
        if args.suite != "locks":
            args.command += f" --suite {args.suite} --runs {args.runs} --seconds {args.seconds:g}"
    if args.suite == "shared":
        return main_shared(args)
    if args.suite == "cycle":
        return main_cycle(args)

    specs = contestants.default_specs(dict(os.environ), args.only)
    results = []
    for spec in specs:
        print(f"measuring {spec.label} ...", file=sys.stderr, flush=True)
        result = measure(spec, args.seconds, args.hold_ms / 1e3, args.think_ms / 1e3)
        if result.error:
            print(f"  failed: {result.error}", file=sys.stderr, flush=True)
        results.append(result)

    load = os.getloadavg()[0]
    report = "\n".join(
        [
            table(results),
            "",
            f"Command: `{args.command}` ({args.seconds:g} s per measurement, {CONTENDERS} "
            f"processes, {args.hold_ms:g} ms inside and {args.think_ms:g} ms between sections). "
            f"Versions: {versions()}. "
            f"Python {sys.version.split()[0]}; load average {load:.1f} at the end of the run; "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        ]
    )
    print(report)
    if args.write:
        write_results(args.write, report)
    failed = [result for result in results if result.error]
    broken = [result for result in results if result.contended and result.contended.overlaps]
    for result in broken:
        print(f"EXCLUSION VIOLATED: {result.spec.label}", file=sys.stderr)
    return 1 if failed or broken else 0


if __name__ == "__main__":
    sys.exit(main())
