"""The interpreter exits cleanly while fencelock's threads wait: a daemon thread blocked in a
fencelock call, the log bridge and a lost-signal wait must not crash the process at shutdown
(CPython ends such threads with pthread_exit, whose unwinding through Rust frames crashed the
release builds with SIGSEGV)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _blocking import BlockingCall
from conftest import LONG, native_test_hook

# Each waiter as (the call a daemon thread blocks in, the fencelock method it waits in).
WAITERS = {
    "acquire": ("lambda: b.acquire('x', ttl=30)", "acquire"),
    "lost-wait": ("lambda: held.lost.wait()", "wait"),
    "events": ("lambda: b.events().next()", "next"),
}


@pytest.mark.parametrize("call,method", WAITERS.values(), ids=WAITERS.keys())
def test_the_process_exits_cleanly_while_a_daemon_thread_waits_in_fencelock(
    tmp_path: Path, call: str, method: str
) -> None:
    script = f"""
import logging, sys, fencelock
sys.path.insert(0, {str(Path(__file__).parent)!r})
from _blocking import BlockingCall
logging.basicConfig(level=logging.DEBUG)  # the log bridge's thread waits too
url = "sqlite://{tmp_path}/" + sys.argv[1] + ".db"  # a file per run: each exits holding "x"
a = fencelock.connect(url)
b = fencelock.connect(url)
held = a.acquire("x", ttl=30)
BlockingCall({call}, {method!r}).entered()  # the exit comes while the thread waits in it
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


def _settled(native_id: int) -> int:
    """The thread's wake count once it stopped waking for 100 ms: it is in its wait. (Once in the
    call, an acquire's thread may wake once or twice more on its way into the wait.)"""
    deadline = time.monotonic() + LONG
    last, quiet_since = _wakeups(native_id), time.monotonic()
    while time.monotonic() - quiet_since < 0.1:
        assert time.monotonic() < deadline, "the thread never settled into its wait"
        time.sleep(0.01)
        now = _wakeups(native_id)
        if now != last:
            last, quiet_since = now, time.monotonic()
    return last


@pytest.mark.parametrize("waiter", ["acquire", "lost-wait", "events"])
def test_a_thread_other_than_the_main_one_waits_without_waking(tmp_path: Path, waiter: str) -> None:
    # Every wake takes the GIL back, and a daemon thread that takes it while the interpreter
    # shuts down is ended under fencelock's frames: off the main thread (no Ctrl-C to look for
    # there) a wait wakes for its answer, not every slice.
    import fencelock

    url = f"sqlite://{tmp_path}/wake.db"
    with fencelock.connect(url) as a, fencelock.connect(url) as b:
        held = a.acquire("x", ttl=30)
        subscription = b.events()
        targets = {
            "acquire": (lambda: b.acquire("x", ttl=30, wait=30), "acquire"),
            # A release is no loss: it ends by timeout.
            "lost-wait": (lambda: held.lost.wait(2.5), "wait"),
            "events": (lambda: subscription.next(), "next"),
        }
        waiting = BlockingCall(*targets[waiter])
        waiting.entered()
        thread = waiting.thread
        assert thread.native_id is not None
        before = _settled(thread.native_id)
        time.sleep(1.5)
        woken = _wakeups(thread.native_id) - before
        # A wait in 100-200 ms slices (before) woke 7 to 16 times here.
        assert woken <= 2, f"the waiting thread woke {woken} times in 1.5 s"
        subscription.close()
        held.release()
        waiting.outcome()


# Every way a fencelock thread enters Python, wanting the GIL while the interpreter finalizes:
# the test hook pauses each one before it takes the GIL until finalization has started.
EXIT_WHILE_BUSY = """
import asyncio, logging, sys, threading, time, fencelock
from fencelock import _native

logging.basicConfig(level=logging.DEBUG)  # the log bridge takes each renewal's record
url = "sqlite://{tmp}/" + sys.argv[1] + ".db"  # a file per run: each exits holding its locks
a = fencelock.connect(url, metrics=True, tracing=True)  # the span and metrics threads
b = fencelock.connect(url)
a.on_event(lambda event: None)  # the event pump
ready = threading.Event()


async def hold_and_watch():
    held = [await a.acquire_async(f"renewing-{{i}}", ttl=0.6) for i in range(3)]
    doomed = await a.acquire_async("doomed", ttl=0.5, auto_renew=False)
    ready.set()
    await doomed.lost  # fires during the exit: its answer is delivered by a runtime worker
    del held


threading.Thread(target=lambda: asyncio.run(hold_and_watch()), daemon=True).start()
ready.wait()
# A daemon thread in a blocking wait that ends (the lock expires) during the exit.
threading.Thread(target=lambda: b.acquire("doomed", ttl=5), daemon=True).start()
_native._test_pause_before_python()
time.sleep(1.0)  # renewals, their events and records, the loss and the wait's end all queue up
print("exiting", flush=True)
"""


def test_no_fencelock_thread_takes_the_gil_once_the_interpreter_finalizes(tmp_path: Path) -> None:
    native_test_hook("_test_pause_before_python")
    script = EXIT_WHILE_BUSY.format(tmp=tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", script, "paused"],
        capture_output=True,
        text=True,
        timeout=LONG,
    )
    assert "a thread takes the GIL during finalization" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert done.stdout.strip() == "exiting"


def test_processes_exit_cleanly_under_load(tmp_path: Path) -> None:
    # Leases renewing, tasks waiting and cancelled, a lease being lost, events and records
    # pending, and a second process spinning, at every exit: none of them may die.
    runs = int(os.environ.get("FENCELOCK_EXIT_STRESS_RUNS", "20"))
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("_exit_stress.py")), "--runs", str(runs)]
        + ["--folder", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=LONG * 4,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"exits: {runs}, clean: {runs}, died: 0" in done.stdout


FORK_WHILE_PASSING = """
import asyncio, os, sys, threading, time, fencelock
from fencelock import _native

url = "sqlite://{tmp}/fork.db"
a = fencelock.connect(url)
ready = threading.Event()


async def watch():
    doomed = await a.acquire_async("doomed", ttl=0.3, auto_renew=False)
    ready.set()
    await doomed.lost  # its answer's thread takes the gate's pass, then pauses


threading.Thread(target=lambda: asyncio.run(watch()), daemon=True).start()
ready.wait()
_native._test_pause_before_python()
time.sleep(1.0)  # the loss, and its answer paused on its way into Python
started = time.monotonic()
child = os.fork()
if child == 0:
    sys.exit(0)  # the child's exit closes its gate, where only its own thread may be
os.waitpid(child, 0)
print(f"{{time.monotonic() - started:.1f}}", flush=True)
"""


def test_a_child_made_by_fork_exits_without_waiting_for_the_parents_threads(
    tmp_path: Path,
) -> None:
    # The child inherits the parent's count of threads on their way into Python, but none of
    # those threads: its exit must not wait for them (10 s, the longest it waits).
    native_test_hook("_test_pause_before_python")
    done = subprocess.run(
        [sys.executable, "-c", FORK_WHILE_PASSING.format(tmp=tmp_path)],
        capture_output=True,
        text=True,
        timeout=LONG,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert float(done.stdout.strip()) < 5.0, done.stdout
