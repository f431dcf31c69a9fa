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


def _wakeups(native_id: int) -> int:
    """How often the thread has gone to sleep and been woken (Linux: /proc)."""
    status = Path(f"/proc/self/task/{native_id}/status").read_text()
    return next(
        int(line.split()[1])
        for line in status.splitlines()
        if line.startswith("voluntary_ctxt_switches")
    )


@pytest.mark.parametrize("waiter", ["acquire", "lost-wait", "events"])
def test_a_thread_other_than_the_main_one_waits_without_waking(tmp_path: Path, waiter: str) -> None:
    # Every wake takes the GIL back, and a daemon thread that takes it while the interpreter
    # shuts down is ended under fencelock's frames: off the main thread (no Ctrl-C to look for
    # there) a wait wakes for its answer, not every slice.
    import threading
    import time

    import fencelock

    url = f"sqlite://{tmp_path}/wake.db"
    with fencelock.connect(url) as a, fencelock.connect(url) as b:
        held = a.acquire("x", ttl=30)
        subscription = b.events()
        targets = {
            "acquire": lambda: b.acquire("x", ttl=30, wait=30),
            "lost-wait": lambda: held.lost.wait(2.5),  # a release is no loss: it ends by timeout
            "events": lambda: next(iter(subscription), None),
        }
        thread = threading.Thread(target=targets[waiter], daemon=True)
        thread.start()
        time.sleep(0.3)  # into its wait
        assert thread.native_id is not None
        before = _wakeups(thread.native_id)
        time.sleep(1.5)
        woken = _wakeups(thread.native_id) - before
        # A wait in 100-200 ms slices (before) woke 7 to 16 times here.
        assert woken <= 2, f"the waiting thread woke {woken} times in 1.5 s"
        subscription.close()
        held.release()
        thread.join(LONG)
        assert not thread.is_alive()
