"""What tracing costs (issue 37): the uncontended acquire-and-release cycle from Python with
`tracing` off, on without an SDK (OpenTelemetry's API alone: non-recording spans), and on with
the SDK exporting through a batch processor (what an application that traces has), on SQLite and
one Redis master. Each configuration runs in a process of its own (the tracer provider is
process-wide), the configurations alternate for --runs rounds, and the table gives the median
cycles per second and each configuration's ratio to tracing off in the same run.

    bench/python/run.sh --suite tracing [--runs N] [--seconds S] [--baseline PYTHON] [--write]

--baseline names the Python of a venv holding another build of fencelock (the one before
tracing existed): its tracing-off cycle is measured in the same rounds, to show what the feature
costs a Locker that does not use it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Dict, List, Optional, Tuple

CONFIGS = ["off", "on, API only", "on, SDK (batch, no-op exporter)"]


def cycle(url: str, config: str, seconds: float) -> float:
    """Cycles per second of acquire + release on `url` in this process, under `config`."""
    import fencelock

    if config.startswith("on, SDK"):
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class Discard(SpanExporter):
            def export(self, spans):  # type: ignore[no-untyped-def]
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Discard()))
        trace.set_tracer_provider(provider)
    tracing = config.startswith("on")
    options = {"tracing": True} if tracing else {}
    name = f"bench-tracing-{uuid.uuid4().hex[:8]}"
    with fencelock.connect(url, **options) as locker:
        for _ in range(200):  # warm up: connections, the runtime, the tracer
            locker.acquire(name).release()
        done = 0
        started = time.perf_counter()
        deadline = started + seconds
        while True:
            for _ in range(50):
                locker.acquire(name).release()
            done += 50
            now = time.perf_counter()
            if now >= deadline:
                return done / (now - started)


def one(python: str, url: str, config: str, seconds: float) -> float:
    out = subprocess.run(
        [python, __file__, "--child", url, config, str(seconds)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(json.loads(out.strip().splitlines()[-1]))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--baseline", help="the Python of a venv with another fencelock build")
    parser.add_argument("--write", help="replace the tracing section of this RESULTS.md")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        url, config, seconds = args.child
        print(json.dumps(cycle(url, config, float(seconds))))
        return 0
    sqlite = "sqlite://" + os.path.join(tempfile.mkdtemp(prefix="fencelock-bench-"), "locks.db")
    redis = os.environ.get("FENCELOCK_TEST_REDIS_URL", "redis://127.0.0.1:6379")
    runs: List[Tuple[str, str]] = [(c, sys.executable) for c in CONFIGS]
    if args.baseline:
        runs.insert(0, ("off, build before tracing", args.baseline))
    rows = []
    for backend, url in [("sqlite", sqlite), ("redis", redis)]:
        seen: Dict[str, List[float]] = {label: [] for label, _ in runs}
        for _ in range(args.runs):
            for label, python in runs:
                config = "off" if label.startswith("off") else label
                seen[label].append(one(python, url, config, args.seconds))
        off = statistics.median(seen["off"])
        for label, _ in runs:
            median = statistics.median(seen[label])
            rows.append(
                f"| {backend} | {label} | {median:.0f} | {1e6 / median:.1f} | {median / off:.2f}x |"
            )
    table = "\n".join(
        [
            "| backend | tracing | cycles/s (median) | µs per cycle | vs off |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    if args.write:
        write(args.write, table, args)
    return 0


SECTION = "## Tracing: what spans cost a Python cycle (`bench/python/tracing.py`)"


def write(path: str, table: str, args: argparse.Namespace) -> None:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    command = f"bench/python/run.sh --suite tracing --runs {args.runs} --seconds {args.seconds:g}"
    body = (
        f"{SECTION}\n\nCommand: `{command}`, run on {time.strftime('%Y-%m-%d %H:%M')} "
        f"(load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores). Each cell is the median of "
        f"{args.runs} alternating runs of {args.seconds:g} s, each in a process of its own.\n\n"
        f"{table}\n"
    )
    start = text.find(SECTION)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + body
    else:
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + body + ("" if end < 0 else text[end:])
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
