"""Exits under load: processes that end while fencelock's threads are busy, none of which may die.

Each child holds leases that renew every 0.1 s, has asyncio tasks waiting for those locks (half
of them cancelled just before the end), a lease about to be lost and its waiters, event and log
subscribers, the span and metrics threads (when OpenTelemetry is installed), and a daemon thread
blocked in a synchronous acquire; then its main thread returns at a random moment, with the
event loop still running on a daemon thread. A second process spins on the CPU meanwhile, which
widens every window of the interpreter's shutdown.

    python _exit_stress.py [--runs N] [--parallel P] [--folder DIR]

prints one line, "exits: N, clean: C, died: D", then each death's exit status and stderr tail,
and exits non-zero when any child died (docs/design.md §9.4). The test suite runs 20 (CI); the
soak, `tests/faults/run.sh soak`, runs 200.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHILD = r"""
import asyncio, importlib.util, logging, random, sys, threading, time, fencelock

logging.basicConfig(level=logging.DEBUG, handlers=[logging.NullHandler()])  # the log bridge works
url = "sqlite://" + sys.argv[1]
otel = importlib.util.find_spec("opentelemetry") is not None
a = fencelock.connect(url, metrics=otel, tracing=otel)
b = fencelock.connect(url)
a.on_event(lambda event: None)
events = b.events()
threading.Thread(target=lambda: list(events), daemon=True).start()
loop = asyncio.new_event_loop()
ready = threading.Event()
tasks = []


async def busy():
    held = [await a.acquire_async(f"renewing-{i}", ttl=0.3) for i in range(4)]
    await a.acquire_async("doomed", ttl=0.2, auto_renew=False)
    tasks.extend(asyncio.ensure_future(b.acquire_async(f"renewing-{i % 4}")) for i in range(8))
    tasks.extend(asyncio.ensure_future(b.acquire_async("doomed", ttl=5)) for _ in range(2))
    tasks.extend(asyncio.ensure_future(lease.lost) for lease in held)
    ready.set()
    await asyncio.sleep(3600)


threading.Thread(target=lambda: loop.run_until_complete(busy()), daemon=True).start()
ready.wait(30)
threading.Thread(target=lambda: b.acquire("doomed", ttl=5), daemon=True).start()
time.sleep(random.uniform(0.0, 0.4))
for task in tasks[:5]:
    loop.call_soon_threadsafe(task.cancel)
print("exiting", flush=True)
"""


def one_exit(folder: Path, run: int) -> tuple[int, str]:
    """(exit status, stderr tail) of one child; status 0 and "exiting" on its stdout is clean."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder / f"exit-{run}.db")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode == 0 and done.stdout.strip() == "exiting":
        return 0, ""
    return done.returncode or -1, done.stderr[-1500:]


def stress(runs: int, parallel: int, folder: Path) -> list[tuple[int, str]]:
    """The deaths among `runs` exits, `parallel` at a time, beside a process spinning."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with ThreadPoolExecutor(parallel) as pool:
            outcomes = list(pool.map(lambda run: one_exit(folder, run), range(runs)))
    finally:
        spinner.kill()
        spinner.wait()
    return [outcome for outcome in outcomes if outcome[0] != 0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--folder", type=Path)
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        deaths = stress(args.runs, args.parallel, args.folder or Path(scratch))
    print(
        f"exits: {args.runs}, clean: {args.runs - len(deaths)}, died: {len(deaths)} "
        f"({time.monotonic() - started:.0f} s)"
    )
    for status, stderr in deaths:
        print(f"--- exit status {status}:\n{stderr}")
    return 1 if deaths else 0


if __name__ == "__main__":
    sys.exit(main())
