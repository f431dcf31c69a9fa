"""fencelock's exceptions: one class per stable error code (docs/design.md §6).

Every exception fencelock raises is a :class:`LockError` with a ``code`` attribute
(``"TIMEOUT"``, ``"LOST"``, ...). Where a builtin fits, the class is also that builtin, so
``except TimeoutError`` catches :class:`Timeout` and ``except ValueError`` catches
:class:`InvalidArgument`. All of them pickle (they cross ``multiprocessing`` intact).

Cancellation is not an error: an interrupted wait raises ``KeyboardInterrupt`` and a cancelled
await raises ``asyncio.CancelledError``, as usual.
"""

from typing import Optional

__all__ = [
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
]


class LockError(Exception):
    """Base of every fencelock error. ``code`` is the stable code shared by every language."""

    #: The stable error code; subclasses fix it. A bare ``LockError`` carries the code of an
    #: error this version has no class for.
    code: str = "UNKNOWN"

    def __init__(self, message: str = "", code: Optional[str] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        """The message, without the code."""
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        return self.message


class Timeout(LockError, TimeoutError):
    """The lock was not acquired before the ``wait`` ended."""

    code = "TIMEOUT"


class Lost(LockError):
    """The lease was lost (expired, taken over, session ended), or used after that."""

    code = "LOST"


class NotHeld(LockError):
    """Release or extend after an explicit release."""

    code = "NOT_HELD"


class Unavailable(LockError, ConnectionError):
    """The backend cannot be reached, or has no quorum."""

    code = "UNAVAILABLE"


class InvalidArgument(LockError, ValueError):
    """A bad name, ttl, wait, URL or option (including ``timeout=``, which fencelock refuses)."""

    code = "INVALID_ARGUMENT"


class InvalidArgumentType(InvalidArgument, TypeError):
    """An argument of the wrong type (a ``bytes`` or ``yarl.URL`` where a ``str`` goes): an
    :class:`InvalidArgument` that is also a ``TypeError``, as Python's own functions raise."""


class Auth(LockError, PermissionError):
    """Authentication or authorization was refused."""

    code = "AUTH"


class StaleToken(LockError):
    """A fence refused a token older than one it already accepted; nothing was written."""

    code = "STALE_TOKEN"


class BackendError(LockError):
    """Any other error from the backend, with its message."""

    code = "BACKEND"


class Deadlock(LockError):
    """A non-reentrant lock entered again by the thread or task that already holds it."""

    code = "DEADLOCK"


class Closed(LockError):
    """The Locker was closed, or the object was inherited across ``fork()``."""

    code = "CLOSED"


class InternalError(LockError):
    """A bug in fencelock, including a caught Rust panic. Please report it."""

    code = "INTERNAL"


class BlockingCallInEventLoop(RuntimeError):
    """A blocking call that waits for a lock (``with locker.lock(...)``, ``acquire()``,
    ``acquire_many()``, a leadership campaign) made in a thread whose asyncio event loop is
    running: it would stall the loop while it waited, and a holder in that loop could never
    release. Use ``async with`` or ``await locker.acquire_async(...)`` there. Calls of one round
    trip (``try_acquire()``, ``inspect()``, ``release()``, ``extend()``, ``close()``) are allowed.

    A mistake in the calling code, so not a :class:`LockError` (``except LockError`` does not
    hide it). Setting ``FENCELOCK_ALLOW_BLOCKING_IN_EVENT_LOOP=1`` allows such calls, for Jupyter,
    whose cells run inside a loop.
    """


class DriverError(Exception):
    """The error a driver reported, chained as the ``__cause__`` of the fencelock error made
    from it (``raise Unavailable(...) from DriverError(...)``).

    ``driver`` is ``"redis"``, ``"zookeeper"``, ``"postgres"``, ``"mysql"``, ``"sqlite"``, or
    ``"sql"`` when no database answered (an I/O or TLS failure). ``code`` is the driver's own
    name for the error: a Redis error code (``"WRONGPASS"``) or kind (``"Io"``), a ZooKeeper
    error (``"NoAuth"``), a PostgreSQL SQLSTATE (``"28P01"``), a MySQL/MariaDB error number
    (``"1045"``) or a SQLite result code (``"5"``). The message has its secrets stripped.

    Not a :class:`LockError`: catch the fencelock error, and read its cause for detail.
    """

    def __init__(self, message: str = "", driver: str = "", code: str = "") -> None:
        super().__init__(message, driver, code)
        self.driver = driver
        self.code = code

    @property
    def message(self) -> str:
        """The driver's message, without the driver and code."""
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        return f"{self.driver} error {self.code}: {self.message}"
