"""fencelock from Python against the locks Python users would otherwise pick, in one run.

    bench/python/run.sh [--only WORD ...] [--seconds S] [--write]

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
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contestants  # noqa: E402
from contestants import Spec  # noqa: E402

CONTENDERS = 8
MARKER_BEGIN = "<!-- python-compare:begin -->"
MARKER_END = "<!-- python-compare:end -->"


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


Timeline = List[Tuple[float, float, int]]


def run_processes(
    context: "mp.context.SpawnContext",
    target: object,
    arguments: List[tuple],
    out: "mp.Queue",
    seconds: float,
) -> Timeline:
    """Starts one process per argument tuple and merges their (acquired, releasing) sections,
    each tagged with its process, in acquisition order; raises if any process failed."""
    workers = [context.Process(target=target, args=args) for args in arguments]
    for worker in workers:
        worker.start()
    timeline: Timeline = []
    errors: List[str] = []
    for _ in workers:
        # A waiter of a slow lock may finish a poll interval late; bound it all the same.
        who, sections, error = out.get(timeout=seconds + 120)
        timeline.extend((acquired, releasing, who) for acquired, releasing in sections)
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


def write_results(path: Path, section: str) -> None:
    text = path.read_text()
    block = f"{MARKER_BEGIN}\n{section}\n{MARKER_END}"
    if MARKER_BEGIN in text:
        head, rest = text.split(MARKER_BEGIN, 1)
        _, tail = rest.split(MARKER_END, 1)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement (default 3)")
    parser.add_argument("--only", nargs="*", help="contestants whose label contains a word")
    parser.add_argument("--hold-ms", type=float, default=2.0, help="work inside each section")
    parser.add_argument("--think-ms", type=float, default=1.0, help="work between sections")
    parser.add_argument("--write", type=Path, help="replace the comparison section of this file")
    parser.add_argument("--command", default="bench/python/run.sh", help="shown in the report")
    args = parser.parse_args(argv)

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
