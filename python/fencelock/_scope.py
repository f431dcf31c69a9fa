"""The execution scope a re-entrant lock counts in: the current asyncio task, else the thread.

Redisson and Curator count re-entries per thread; asyncio code runs many tasks on one thread, so
there the task is the scope. Each scope gets a number of its own that is never reused while the
process lives (thread idents and task ids are reused, and a context variable would be inherited
by tasks created inside a ``with`` block, which must contend instead of re-entering).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import weakref
from typing import Any, Awaitable

_numbers = itertools.count(1)
_thread = threading.local()
_tasks: "weakref.WeakKeyDictionary[asyncio.Task[object], int]" = weakref.WeakKeyDictionary()
_tasks_lock = threading.Lock()


def current_scope() -> int:
    """The number of the calling task, or of the calling thread outside any task."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running event loop in this thread
        task = None
    if task is not None:
        with _tasks_lock:
            number = _tasks.get(task)
            if number is None:
                number = _tasks[task] = next(_numbers)
        return number
    number = getattr(_thread, "number", None)
    if number is None:
        number = _thread.number = next(_numbers)
    return number


async def entered(acquiring: Awaitable[Any]) -> Any:
    """What ``async with lock as x`` binds: awaits the acquisition and records its lease in the
    Lock's table in the same step. A task cancelled after the acquire completed but before asyncio
    handed it the result never gets here: the undelivered lease is then released in the
    background rather than kept, held and renewed, in a table no exit will look at."""
    return (await acquiring).receive()
