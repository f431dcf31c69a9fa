"""Locks as decorators: ``@locker.locked(name, ...)``, or any Lock (``@locker.lock(name, ...)``,
``@locker.semaphore(name, permits)``, ...), runs each call of a function or coroutine function
while holding the lock, and :func:`current_lease` gives the call its Lease."""

from __future__ import annotations

import contextvars
import functools
import inspect
from typing import Any, Callable, Optional

from ._errors import InvalidArgumentType

__all__ = ["current_lease", "wrap"]

# The entered object (a Lease, or a Leadership) of the innermost decorated call running in
# this thread or task. A context variable, so a task or thread started inside the call sees
# it only through a copied context, and each asyncio task has its own.
_entered: contextvars.ContextVar[Optional[Any]] = contextvars.ContextVar(
    "fencelock_current_lease", default=None
)


def current_lease() -> Any:
    """The Lease held for the innermost call of a lock decorator running in this thread or
    asyncio task (the Leadership, for ``@locker.leadership(...)``).

    Raises ``LookupError`` outside such a call.
    """
    entered = _entered.get()
    if entered is None:
        raise LookupError("no call of a fencelock lock decorator is running here")
    return entered


def wrap(lock: Any, func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` running each call inside ``with lock`` (``async with lock`` for a coroutine
    function)."""
    if not callable(func):
        raise InvalidArgumentType(
            f"a lock decorates a function or coroutine function, not {type(func).__name__}"
        )
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        # The lock would be held only until the first yield, or across the caller's pauses:
        # neither is what a decorator promises.
        raise InvalidArgumentType(
            "a lock cannot decorate a generator function: take the lock inside it with `with`"
        )
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def locked_coroutine(*args: Any, **kwargs: Any) -> Any:
            async with lock as entered:
                reset = _entered.set(entered)
                try:
                    return await func(*args, **kwargs)
                finally:
                    _entered.reset(reset)

        return locked_coroutine

    @functools.wraps(func)
    def locked_call(*args: Any, **kwargs: Any) -> Any:
        with lock as entered:
            reset = _entered.set(entered)
            try:
                return func(*args, **kwargs)
            finally:
                _entered.reset(reset)

    return locked_call
