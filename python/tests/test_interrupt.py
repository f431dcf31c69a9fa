"""Ctrl-C (SIGINT) interrupts a blocked acquire and leaves nothing behind."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import fencelock


def test_sigint_interrupts_a_blocked_acquire(locker: fencelock.Locker, url: str) -> None:
    lease = locker.acquire("ctrl-c", ttl=10)
    script = Path(__file__).with_name("_interrupted.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # well inside acquire by now
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    lines = out.split("\n")
    assert lines[0].startswith("interrupted after"), out
    assert lines[1] == "held", out
    # Our lease is intact, and once released the lock is free: the interrupted attempt left
    # nothing behind.
    assert lease.is_held
    lease.release()
    again = locker.try_acquire("ctrl-c")
    assert again is not None
    again.release()
