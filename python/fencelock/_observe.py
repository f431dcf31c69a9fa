"""Where fencelock's log records and lifecycle events meet Python.

Logs: the Rust core queues its records; one daemon thread, ``fencelock-logging``, takes them
out (waiting with the GIL released) and hands them to ``logging.getLogger("fencelock")``. The
core only queues records at the logger's effective level or above, so a level that is off costs
Python nothing; the thread follows level changes each time it wakes (at least every 2 s).
Configure it as any logger: ``logging.getLogger("fencelock").setLevel(logging.DEBUG)``. A
record produced during a call (acquire, extend, release, close, ...) is handled in the
``contextvars`` of that call, as captured when it started: filters and formatters that read a
request id or the current span see the caller's, not the logging thread's.

Events: ``locker.on_event(callback)`` runs ``callback(event)`` on a daemon thread per
subscription, in order for each lease. No Rust thread ever calls into Python.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Callable, Iterable, Optional

from . import _native

LOGGER = logging.getLogger("fencelock")

#: How long the logging thread waits for a record before looking at the logger's level again.
_LEVEL_CHECK_SECONDS = 2.0

_bridge_lock = threading.Lock()
_bridge: Optional[threading.Thread] = None

_EVENT_KINDS = frozenset(
    {
        "acquired",
        "renewed",
        "renewal_retried",
        "suspended",
        "resumed",
        "lost",
        "released",
        "deployment_mismatch",
    }
)


def _pump_logs(subscription: Any) -> None:
    level = LOGGER.getEffectiveLevel()
    while True:
        record = subscription.next(_LEVEL_CHECK_SECONDS)
        now_level = LOGGER.getEffectiveLevel()
        if now_level != level:
            level = now_level
            subscription.set_level(level)
        if record is None:
            continue
        levelno, message, lock, created, context = record
        if not LOGGER.isEnabledFor(levelno):
            continue
        made = LOGGER.makeRecord(
            LOGGER.name, levelno, "(fencelock)", 0, message, None, None, extra={"lock_name": lock}
        )
        made.created = created
        made.msecs = (created - int(created)) * 1000
        if context is None:
            LOGGER.handle(made)
        else:
            # The context variables of the call that produced it (a request id, the current
            # span): what the application's filters and formatters read.
            context.run(LOGGER.handle, made)


def _ensure_log_bridge() -> None:
    """Starts the logging thread once per process (connect() calls this)."""
    global _bridge
    if _bridge is not None and _bridge.is_alive():
        return
    with _bridge_lock:
        if _bridge is not None and _bridge.is_alive():
            return
        subscription = _native._LogSubscription(LOGGER.getEffectiveLevel())
        thread = threading.Thread(
            target=_pump_logs, args=(subscription,), name="fencelock-logging", daemon=True
        )
        thread.start()
        _bridge = thread


def _forget_bridge_after_fork() -> None:
    # The thread did not survive fork(); the next connect() in the child starts another.
    global _bridge, _bridge_lock
    _bridge = None
    _bridge_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_bridge_after_fork)


def _listen(
    subscription: Any, callback: Callable[[Any], object], kinds: Optional[Iterable[str]]
) -> None:
    """Runs `callback` for each event of `subscription` on a daemon thread of its own."""
    wanted = None
    if kinds is not None:
        if isinstance(kinds, str):
            kinds = [kinds]
        wanted = frozenset(kinds)
        unknown = wanted - _EVENT_KINDS
        if unknown:
            from ._errors import InvalidArgument

            subscription.close()
            raise InvalidArgument(
                f"unknown event kind(s) {sorted(unknown)}; the kinds are {sorted(_EVENT_KINDS)}"
            )

    def pump() -> None:
        while True:
            event = subscription.next()
            if event is None:
                return
            if wanted is not None and event.kind not in wanted:
                continue
            try:
                callback(event)
            except Exception:
                LOGGER.exception("fencelock: an on_event callback raised (event %r)", event)

    threading.Thread(target=pump, name="fencelock-events", daemon=True).start()
