"""fencelock: distributed locks with fencing tokens.

One Rust implementation of the lock algorithms, shared by Python, Rust, Node.js, the JVM and
the ``fencelock`` command, so services in different languages lock the same resources with the
same guarantees.

    import fencelock

    with fencelock.connect("sqlite:///var/lib/myapp/locks.db") as locker:
        with locker.lock("nightly-report", ttl=30) as lease:
            fence.fenced_execute(lease, [("UPDATE reports SET done = 1 WHERE id = ?", [7])])

In asyncio: ``locker = await fencelock.connect_async(url)``, ``async with locker.lock(name)``,
and the ``_async`` twin of each waiting method (``acquire_async``, ``release_async``, ...).

Besides the mutex of ``locker.lock(name)``: ``with locker.semaphore(name, permits=3)`` (at most
3 holders at once), ``with locker.read_lock(name)`` (many readers) and
``with locker.write_lock(name)`` (one writer alone), each with ``async with`` too; a lease's
``mode`` says which it holds.

As a decorator: ``@locker.locked("nightly", ttl=60)`` runs each call of a function or coroutine
function holding the lock; ``fencelock.current_lease()`` is the call's Lease. A blocking call that
waits for a lock, made inside a running asyncio loop, raises ``fencelock.BlockingCallInEventLoop``
(use the async form there).

Several names at once: ``with locker.lock_many(["a", "b"]) as lease:`` takes every name or none,
in one order whatever the order given (no deadlock between overlapping sets); ``lease.part(name)``
is that name's Lease, to give the fence it guards.

Logs go to ``logging.getLogger("fencelock")``; ``locker.on_event(callback)`` reports each
lease's lifecycle (acquired, renewed, renewal_retried, suspended, resumed, lost, released,
deployment_mismatch).

Durations are seconds (int or float) or ``datetime.timedelta``. There is no ``timeout=``:
``ttl=`` is how long a lease lasts, ``wait=`` how long acquiring may block (None = forever).
"""

from ._decorate import current_lease
from ._errors import (
    Auth,
    BackendError,
    BlockingCallInEventLoop,
    Closed,
    Deadlock,
    DriverError,
    InternalError,
    InvalidArgument,
    LockError,
    Lost,
    NotHeld,
    StaleToken,
    Timeout,
    Unavailable,
)
from ._native import (
    EventSubscription,
    Fence,
    Leader,
    Leadership,
    Lease,
    Lock,
    Locker,
    LockEvent,
    LockInfo,
    LockList,
    LostSignal,
    MultiLease,
    MultiLock,
    __version__,
    connect,
    connect_async,
)

__all__ = [
    "connect",
    "connect_async",
    "Locker",
    "Lock",
    "Lease",
    "MultiLock",
    "MultiLease",
    "Leadership",
    "Leader",
    "LostSignal",
    "LockInfo",
    "LockList",
    "LockEvent",
    "EventSubscription",
    "Fence",
    "LockError",
    "Timeout",
    "Lost",
    "NotHeld",
    "Unavailable",
    "InvalidArgument",
    "Auth",
    "StaleToken",
    "BackendError",
    "Deadlock",
    "Closed",
    "InternalError",
    "BlockingCallInEventLoop",
    "DriverError",
    "current_lease",
    "__version__",
]
