"""The interpreter exits cleanly while fencelock's threads wait: a daemon thread blocked in a
fencelock call, the log bridge and a lost-signal wait must not crash the process at shutdown
(CPython ends such threads with pthread_exit, whose unwinding through Rust frames crashed the
release builds with SIGSEGV)."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LONG

WAITERS = {
    "acquire": "threading.Thread(target=lambda: b.acquire('x', ttl=30), daemon=True).start()",
    "lost-wait": "threading.Thread(target=lambda: held.lost.wait(), daemon=True).start()",
    "events": "threading.Thread(target=lambda: list(b.events()), daemon=True).start()",
}


@pytest.mark.parametrize("waiter", WAITERS.values(), ids=WAITERS.keys())
def test_the_process_exits_cleanly_while_a_daemon_thread_waits_in_fencelock(
    tmp_path: Path, waiter: str
) -> None:
    script = f"""
import logging, sys, threading, time, fencelock
logging.basicConfig(level=logging.DEBUG)  # the log bridge's thread waits too
url = "sqlite://{tmp_path}/" + sys.argv[1] + ".db"  # a file per run: each exits holding "x"
a = fencelock.connect(url)
b = fencelock.connect(url)
held = a.acquire("x", ttl=30)
{waiter}
time.sleep(0.3)
print("exiting", flush=True)
"""
    for run in range(3):
        done = subprocess.run(
            [sys.executable, "-c", script, f"run{run}"],
            capture_output=True,
            text=True,
            timeout=LONG,
        )
        assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
        assert done.stdout.strip() == "exiting"
