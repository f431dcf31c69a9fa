"""A call into fencelock on a thread of its own, and the moment that thread is inside it.

A test that acts on a thread blocked in fencelock (closes the Locker under it, measures how often
it wakes, exits the interpreter around it) must act once the thread is in the call, not after a
sleep that guesses how long getting there takes on a busy machine. A profile hook on the thread
sees the native method called: from then on the thread is in it, where fencelock releases the
GIL and waits. A mutex's waiter shows nowhere else on most backends (inspect() lists the waiters
of a semaphore or a read-write lock, and ZooKeeper's queue: docs/design.md §7.5).

No pytest here: the child processes of test_exit.py import it too.
"""

import sys
import threading
from types import FrameType
from typing import Any, Callable, Optional

LONG = 30.0


class BlockingCall:
    """Runs `call` on a daemon thread; `entered()` returns once it has called the method named
    `method` of a fencelock object, and `outcome()` what the call returned or raised."""

    def __init__(self, call: Callable[[], Any], method: str) -> None:
        self._call = call
        self._method = method
        self._entered = threading.Event()
        self._done = threading.Event()
        # Set by either: what entered() waits for.
        self._moved = threading.Event()
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "c_call" or getattr(arg, "__name__", None) != self._method:
            return
        # A method of fencelock's own classes (a threading lock's acquire() is not the one).
        if type(getattr(arg, "__self__", None)).__module__ == "fencelock":
            self._entered.set()
            self._moved.set()

    def _run(self) -> None:
        sys.setprofile(self._hook)
        try:
            self.result = self._call()
        except BaseException as e:  # noqa: BLE001 - handed over by outcome()
            self.error = e
        finally:
            sys.setprofile(None)
            self._done.set()
            self._moved.set()

    def entered(self, within: float = LONG) -> None:
        """Returns once the thread is in the call, and still there; fails if it never got there
        or if the call has ended (then it did not block)."""
        self._moved.wait(within)
        if self._done.is_set():
            raise AssertionError(
                f"the call ended instead of blocking in {self._method}(): "
                f"{self.error if self.error is not None else self.result!r}"
            )
        if not self._entered.is_set():
            raise AssertionError(f"{self._method}() was not called within {within} s")

    def outcome(self, within: float = LONG) -> Any:
        """What the call returned, once it did; raises what it raised."""
        if not self._done.wait(within):
            raise AssertionError(f"{self._method}() did not return within {within} s")
        if self.error is not None:
            raise self.error
        return self.result
