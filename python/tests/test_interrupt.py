"""Ctrl-C (SIGINT) interrupts a blocked acquire and leaves nothing behind."""

import signal
import subprocess
import sys
from pathlib import Path

from test_operations import wait_until

import fencelock


def test_sigint_interrupts_a_blocked_acquire(locker: fencelock.Locker, url: str) -> None:
    # A write lock: its waiter is registered where inspect() shows it (a mutex's waiter is not,
    # except on ZooKeeper), so the signal comes while the child waits, and the waiter is seen to
    # go.
    with locker.write_lock("ctrl-c", ttl=10) as lease:
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
            wait_until(lambda: locker.inspect("ctrl-c").waiters != [])
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert proc.returncode == 0, err
        lines = out.split("\n")
        assert lines[0].startswith("interrupted after"), out
        assert lines[1] == "held", out
        # Our lease is intact, and the interrupted attempt left no waiter behind.
        assert lease.is_held
        wait_until(lambda: locker.inspect("ctrl-c").waiters == [])
    # Once released, the lock is free.
    with locker.write_lock("ctrl-c", wait=0):
        pass
