"""Type stubs of fencelock's native module (checked against the built module by mypy.stubtest)."""

from collections.abc import Awaitable, Generator, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Callable, Generic, Literal, Optional, TypeVar, Union, final

from typing_extensions import Self, TypeAlias

from ._errors import LockError

__all__ = [
    "__version__",
    "Fence",
    "Lease",
    "Leader",
    "Leadership",
    "Lock",
    "MultiLease",
    "MultiLock",
    "EventSubscription",
    "LockEvent",
    "LockInfo",
    "LockList",
    "Locker",
    "LostSignal",
    "connect",
    "connect_async",
    "_LogSubscription",
]

# Private, outside __all__: the core's contract (docs/design.md §9.3), for the tests.
def _contract() -> dict[str, Any]: ...
def _exception_for_code(code: str) -> LockError: ...

__version__: str

_T = TypeVar("_T")
_Entered = TypeVar("_Entered", "Lease", "Leadership")
_Func = TypeVar("_Func", bound=Callable[..., Any])

#: _Seconds (int or float) or a timedelta.
_Seconds: TypeAlias = Union[int, float, timedelta]
#: How a lease holds its name (`Lease.mode`).
_LeaseMode: TypeAlias = Literal["exclusive", "permit", "read", "write"]
#: What a name is used as (`LockInfo.kind`).
_LockKind: TypeAlias = Literal["mutex", "semaphore", "read-write lock"]
#: A value bound to a statement parameter.
_SqlParam: TypeAlias = Union[None, bool, int, float, str, bytes, bytearray, memoryview]
#: One statement of a fenced write: `(sql, params)`, `(sql,)` or a bare sql string.
_SqlStatement: TypeAlias = Union[
    str, tuple[str], tuple[str, Optional[Sequence[_SqlParam]]], Sequence[Any]
]

def connect(
    url: str,
    *,
    poll_interval: Optional[_Seconds] = None,
    operation_timeout: Optional[_Seconds] = None,
    metrics: bool = False,
) -> Locker:
    """Connects to the backend that `url` selects and returns a Locker."""

def connect_async(
    url: str,
    *,
    poll_interval: Optional[_Seconds] = None,
    operation_timeout: Optional[_Seconds] = None,
    metrics: bool = False,
) -> Awaitable[Locker]:
    """Awaitable `connect`."""

@final
class Locker:
    """A client bound to one backend, made by `fencelock.connect(url)`."""

    @property
    def closed(self) -> bool: ...
    @property
    def url(self) -> str: ...
    def lock(
        self,
        name: str,
        *,
        ttl: _Seconds = 30,
        wait: Optional[_Seconds] = None,
        auto_renew: bool = True,
        max_hold: Optional[_Seconds] = None,
        holder: Optional[str] = None,
        reentrant: bool = False,
        pipelined_release: bool = False,
    ) -> Lock[Lease]: ...
    def locked(
        self,
        name: str,
        *,
        ttl: _Seconds = 30,
        wait: Optional[_Seconds] = None,
        auto_renew: bool = True,
        max_hold: Optional[_Seconds] = None,
        holder: Optional[str] = None,
        reentrant: bool = False,
        pipelined_release: bool = False,
    ) -> Lock[Lease]:
        """The lock `name` as a decorator: `@locker.locked("nightly", ttl=60, wait=0)` runs each
        call of the function or coroutine function while holding it; inside,
        `fencelock.current_lease()` is the call's Lease. The same Lock as `lock(name, ...)`."""
    def semaphore(
        self,
        name: str,
        permits: int,
        *,
        ttl: _Seconds = 30,
        wait: Optional[_Seconds] = None,
        auto_renew: bool = True,
        max_hold: Optional[_Seconds] = None,
        holder: Optional[str] = None,
        reentrant: bool = False,
        pipelined_release: bool = False,
    ) -> Lock[Lease]:
        """One of `permits` permits (1 to 10000) of the semaphore `name`, for `with` or
        `async with`: at most `permits` blocks hold it at once, each with a Lease of its own
        (`mode` "permit"). Every participant must use the same `permits` while the semaphore is
        held or waited on (another raises InvalidArgument on entering). A permit cannot guard a
        Fence. Options, errors, re-entry and the lost signal as for `lock()`. Redlock refuses
        semaphores with InvalidArgument."""
    def read_lock(
        self,
        name: str,
        *,
        ttl: _Seconds = 30,
        wait: Optional[_Seconds] = None,
        auto_renew: bool = True,
        max_hold: Optional[_Seconds] = None,
        holder: Optional[str] = None,
        reentrant: bool = False,
        pipelined_release: bool = False,
    ) -> Lock[Lease]:
        """The read lock of the read-write lock `name`, for `with` or `async with`: any number of
        readers at once while no writer holds it; once a writer waits, new readers queue behind
        it. Its Lease (`mode` "read") cannot guard a Fence. Options, errors, re-entry and the
        lost signal as for `lock()`. Redlock refuses it with InvalidArgument."""
    def write_lock(
        self,
        name: str,
        *,
        ttl: _Seconds = 30,
        wait: Optional[_Seconds] = None,
        auto_renew: bool = True,
        max_hold: Optional[_Seconds] = None,
        holder: Optional[str] = None,
        reentrant: bool = False,
        pipelined_release: bool = False,
    ) -> Lock[Lease]:
        """The write lock of the read-write lock `name`, for `with` or `async with`: one writer,
        while no reader holds it. Its Lease (`mode` "write") has a token larger than every
        earlier read or write token of the name, and guards a Fence as a mutex's does. Entering
        it while the same thread or task holds the read lock raises Deadlock."""
    def lock_many(
        self,
        names: Iterable[str],
        *,
        ttl: _Seconds = 30,
        wait: Optional[_Seconds] = None,
        auto_renew: bool = True,
        max_hold: Optional[_Seconds] = None,
        holder: Optional[str] = None,
        reentrant: bool = False,
        pipelined_release: bool = False,
    ) -> MultiLock:
        """The mutexes of every name in `names` as one lock, for `with` or `async with`: entering
        takes all of them or none, in one canonical order (sorted by name) whatever order they
        are given in, so blocks taking overlapping sets never deadlock; the block gets a
        MultiLease and leaving releases every name. `wait` bounds the whole, the other options
        apply to each name. No names, more than 64, a name twice or a bad name raise
        InvalidArgument on entering, before anything is taken; a str instead of an iterable of
        str, or an element that is not a str, raises InvalidArgument (also a TypeError) here.
        Options, errors, re-entry and leaving after a loss as for `lock()`."""
    def leadership(
        self,
        name: str,
        *,
        ttl: _Seconds = 30,
        wait: Optional[_Seconds] = None,
        auto_renew: bool = True,
        max_hold: Optional[_Seconds] = None,
        holder: Optional[str] = None,
        pipelined_release: bool = False,
    ) -> Lock[Leadership]: ...
    def run_as_leader(
        self,
        name: str,
        func: Callable[[Leadership], _T],
        *,
        ttl: _Seconds = 30,
        wait: Optional[_Seconds] = None,
        auto_renew: bool = True,
        max_hold: Optional[_Seconds] = None,
        holder: Optional[str] = None,
        pipelined_release: bool = False,
    ) -> _T: ...
    def leader(self, name: str) -> Optional[Leader]: ...
    def leader_async(self, name: str) -> Awaitable[Optional[Leader]]: ...
    def acquire(
        self,
        name: str,
        *,
        ttl: _Seconds = 30,
        wait: Optional[_Seconds] = None,
        auto_renew: bool = True,
        max_hold: Optional[_Seconds] = None,
        holder: Optional[str] = None,
        reentrant: bool = False,
        pipelined_release: bool = False,
    ) -> Lease: ...
    def try_acquire(
        self,
        name: str,
        *,
        ttl: _Seconds = 30,
        auto_renew: bool = True,
        max_hold: Optional[_Seconds] = None,
        holder: Optional[str] = None,
        reentrant: bool = False,
        pipelined_release: bool = False,
    ) -> Optional[Lease]: ...
    def acquire_async(
        self,
        name: str,
        *,
        ttl: _Seconds = 30,
        wait: Optional[_Seconds] = None,
        auto_renew: bool = True,
        max_hold: Optional[_Seconds] = None,
        holder: Optional[str] = None,
        reentrant: bool = False,
        pipelined_release: bool = False,
    ) -> Awaitable[Lease]: ...
    def try_acquire_async(
        self,
        name: str,
        *,
        ttl: _Seconds = 30,
        auto_renew: bool = True,
        max_hold: Optional[_Seconds] = None,
        holder: Optional[str] = None,
        reentrant: bool = False,
        pipelined_release: bool = False,
    ) -> Awaitable[Optional[Lease]]: ...
    def acquire_many(
        self,
        names: Iterable[str],
        *,
        ttl: _Seconds = 30,
        wait: Optional[_Seconds] = None,
        auto_renew: bool = True,
        max_hold: Optional[_Seconds] = None,
        holder: Optional[str] = None,
        reentrant: bool = False,
        pipelined_release: bool = False,
    ) -> MultiLease:
        """Acquires every name in `names`, all or none, in one canonical order (sorted by name),
        waiting up to `wait` for the whole (forever by default). Timeout names the name that
        stayed busy (the names already taken are given back); InvalidArgument for no names,
        more than 64, a name twice or a bad name, before anything is taken. Ctrl-C interrupts
        the wait, leaving nothing behind. Options as for `lock()`."""
    def acquire_many_async(
        self,
        names: Iterable[str],
        *,
        ttl: _Seconds = 30,
        wait: Optional[_Seconds] = None,
        auto_renew: bool = True,
        max_hold: Optional[_Seconds] = None,
        holder: Optional[str] = None,
        reentrant: bool = False,
        pipelined_release: bool = False,
    ) -> Awaitable[MultiLease]:
        """Awaitable `acquire_many`; cancelling the await leaves nothing behind."""
    def inspect(self, name: str) -> LockInfo: ...
    def inspect_async(self, name: str) -> Awaitable[LockInfo]: ...
    def list(self, prefix: Optional[str] = None) -> LockList: ...
    def list_async(self, prefix: Optional[str] = None) -> Awaitable[LockList]: ...
    def force_release(self, name: str) -> None: ...
    def force_release_async(self, name: str) -> Awaitable[None]: ...
    def events(self) -> EventSubscription: ...
    def on_event(
        self,
        callback: Callable[[LockEvent], object],
        kinds: Optional[Union[str, Sequence[str]]] = None,
    ) -> EventSubscription: ...
    def close(self) -> None: ...
    def close_async(self) -> Awaitable[None]: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...
    def __aenter__(self) -> Awaitable[Self]: ...
    def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> Awaitable[bool]: ...

@final
class Lock(Generic[_Entered]):
    """`locker.lock(name, ...)`, `semaphore(name, permits, ...)`, `read_lock(name, ...)` or
    `write_lock(name, ...)`: acquires when entered (`with` or `async with`), releases when left.
    From `locker.leadership(name, ...)`, entering yields the Leadership and leaving resigns."""

    @property
    def name(self) -> str: ...
    def __enter__(self) -> _Entered: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...
    def __aenter__(self) -> Awaitable[_Entered]: ...
    def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> Awaitable[bool]: ...
    def __call__(self, func: _Func) -> _Func:
        """As a decorator: each call of `func` (a function, or a coroutine function) runs while
        holding the lock; `fencelock.current_lease()` is the call's Lease. A generator function
        is refused (`TypeError`)."""

@final
class Lease:
    """Proof of holding one lock, with its fencing token."""

    @property
    def name(self) -> str: ...
    @property
    def token(self) -> int: ...
    @property
    def mode(self) -> _LeaseMode:
        """How this lease holds its name: "exclusive" (a mutex's or an election's), "permit" (a
        semaphore's), "read" or "write" (a read-write lock's). Only "exclusive" and "write"
        leases may guard a Fence."""
    @property
    def expires_at(self) -> Optional[datetime]: ...
    @property
    def valid_until(self) -> datetime:
        """The client deadline (UTC-aware): after it this client counts the lease lost unless a
        renewal succeeds first. It moves forward with each renewal; on backends with a ttl it
        comes before `expires_at`."""
    @property
    def is_lost(self) -> bool: ...
    @property
    def is_held(self) -> bool: ...
    @property
    def renewal_failing(self) -> bool:
        """Whether the last renewal failed (renewals are retried until the client deadline)."""
    @property
    def is_suspended(self) -> bool:
        """Whether the lease's connection is down (ZooKeeper's "suspended") or its last renewal
        failed: stop writing until it clears; the lease is lost at its deadline otherwise."""
    @property
    def lost(self) -> LostSignal: ...
    def raise_if_lost(self) -> None: ...
    def extend(self, ttl: Optional[_Seconds] = None) -> None: ...
    def extend_async(self, ttl: Optional[_Seconds] = None) -> Awaitable[None]: ...
    def release(self) -> None: ...
    def release_async(self) -> Awaitable[None]: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...
    def __aenter__(self) -> Awaitable[Self]: ...
    def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> Awaitable[bool]: ...

@final
class MultiLock:
    """`locker.lock_many(names, ...)`: acquires every name when entered (`with` or
    `async with`), all or none, and releases them when left. Re-entry per thread or task as
    for `lock()`."""

    @property
    def names(self) -> list[str]:
        """The names, as given."""
    def __enter__(self) -> MultiLease: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...
    def __aenter__(self) -> Awaitable[MultiLease]: ...
    def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> Awaitable[bool]: ...

@final
class MultiLease:
    """Proof of holding several locks at once (`locker.acquire_many`, `locker.lock_many`).

    Each name is held by a Lease of its own (`part(name)`) with its own fencing token: a Fence
    takes the part of the name that guards it. Held while every part is; lost the moment any
    part is."""

    @property
    def names(self) -> list[str]:
        """The names, in the canonical order they were taken in (sorted by name)."""
    @property
    def tokens(self) -> dict[str, int]:
        """Each name's fencing token, in the canonical order."""
    def part(self, name: str) -> Optional[Lease]:
        """The Lease of one name (the same object each time), to guard a Fence; None for a
        name that is not a part."""
    @property
    def is_held(self) -> bool:
        """Every part is still held: none released, none lost."""
    @property
    def is_lost(self) -> bool:
        """Some part is lost."""
    @property
    def lost(self) -> LostSignal:
        """Set the moment any part is lost."""
    def raise_if_lost(self) -> None:
        """Raises Lost if a part was lost, NotHeld after release, Closed after fork()."""
    @property
    def valid_until(self) -> datetime:
        """The earliest part's client deadline (UTC-aware)."""
    @property
    def expires_at(self) -> Optional[datetime]:
        """The earliest part's expiry on the backend; None on backends without a ttl."""
    def extend(self, ttl: Optional[_Seconds] = None) -> None:
        """A new ttl from now on every part; raises the first part's error."""
    def extend_async(self, ttl: Optional[_Seconds] = None) -> Awaitable[None]: ...
    def release(self) -> None:
        """Releases every part, whatever happens to the others; raises Lost if any part was
        lost first, else NotHeld if any was already released."""
    def release_async(self) -> Awaitable[None]: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...
    def __aenter__(self) -> Awaitable[Self]: ...
    def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> Awaitable[bool]: ...

@final
class LostSignal:
    """Set once, when its lease is lost; `is_set()`, `wait(timeout)`, `await lease.lost`."""

    @property
    def reason(self) -> Optional[str]: ...
    def is_set(self) -> bool: ...
    def wait(self, timeout: Optional[_Seconds] = None) -> bool: ...
    def __await__(self) -> Generator[Any, None, bool]: ...

@final
class LockInfo:
    """What a backend knows about one lock, read by `locker.inspect(name)`."""

    @property
    def name(self) -> str: ...
    @property
    def held(self) -> bool: ...
    @property
    def token(self) -> Optional[int]: ...
    @property
    def holder(self) -> Optional[dict[str, Any]]: ...
    @property
    def time_left(self) -> Optional[float]: ...
    @property
    def waiters(self) -> list[dict[str, Any]]: ...
    @property
    def kind(self) -> _LockKind:
        """What the name is used as: "mutex" (also for a name nobody uses), "semaphore" or
        "read-write lock"."""
    @property
    def permits(self) -> Optional[int]:
        """A semaphore's number of permits; None for the other kinds."""
    @property
    def leases(self) -> list[dict[str, Any]]:
        """Every holder of a semaphore or read-write lock (empty for a mutex): dicts with `mode`,
        `token`, `holder` (a dict as `LockInfo.holder`) and `time_left` (seconds), each None
        when unknown."""

@final
class LockList:
    """The held locks whose names start with a prefix, by name (`locker.list(prefix)`)."""

    @property
    def truncated(self) -> bool: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> LockInfo: ...
    def __iter__(self) -> Iterator[LockInfo]: ...

@final
class LockEvent:
    """One thing that happened to one lease (`locker.on_event`, `locker.events()`)."""

    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def token(self) -> int: ...
    @property
    def backend(self) -> str: ...
    @property
    def timestamp(self) -> float: ...
    @property
    def reason(self) -> Optional[str]: ...

@final
class EventSubscription:
    """The lifecycle events of a Locker's leases; iterate it or call `next(timeout)`."""

    def next(self, timeout: Optional[_Seconds] = None) -> Optional[LockEvent]: ...
    def __iter__(self) -> Self: ...
    def __next__(self) -> LockEvent: ...
    @property
    def dropped(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...

@final
class _LogSubscription:
    def __new__(cls, level: int) -> Self: ...
    def next(self, timeout: float) -> Optional[tuple[int, str, Optional[str], float]]: ...
    def set_level(self, level: int) -> None: ...
    def close(self) -> None: ...

@final
class Leadership:
    """Leadership of an election; `term` is its lease's fencing token."""

    @property
    def name(self) -> str: ...
    @property
    def term(self) -> int: ...
    @property
    def is_leader(self) -> bool: ...
    @property
    def lease(self) -> Lease: ...
    @property
    def lost(self) -> LostSignal: ...
    def raise_if_lost(self) -> None: ...
    def resign(self) -> None: ...
    def resign_async(self) -> Awaitable[None]: ...

@final
class Leader:
    """Who leads an election now, from `locker.leader(name)`."""

    @property
    def term(self) -> int: ...
    @property
    def holder(self) -> Optional[dict[str, Any]]: ...

@final
class Fence:
    """A fence on one resource: accepts a write only if its token is at least the highest seen."""

    @staticmethod
    def open(
        url: str,
        resource: str,
        *,
        poll_interval: Optional[_Seconds] = None,
        operation_timeout: Optional[_Seconds] = None,
    ) -> Fence: ...
    @staticmethod
    def open_async(
        url: str,
        resource: str,
        *,
        poll_interval: Optional[_Seconds] = None,
        operation_timeout: Optional[_Seconds] = None,
    ) -> Awaitable[Fence]: ...
    @property
    def resource(self) -> str: ...
    def fenced_execute(
        self, token: Union[Lease, int], statements: Sequence[_SqlStatement]
    ) -> list[int]: ...
    def fenced_execute_async(
        self, token: Union[Lease, int], statements: Sequence[_SqlStatement]
    ) -> Awaitable[list[int]]: ...
    def fenced_set(self, token: Union[Lease, int], key: str, value: Union[bytes, str]) -> None: ...
    def fenced_set_async(
        self, token: Union[Lease, int], key: str, value: Union[bytes, str]
    ) -> Awaitable[None]: ...
    def check(self, token: Union[Lease, int]) -> None: ...
    def check_async(self, token: Union[Lease, int]) -> Awaitable[None]: ...
    def highest(self) -> Optional[int]: ...
    def highest_async(self) -> Awaitable[Optional[int]]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...
