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
    "_Entering",
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
    tracing: bool = False,
) -> Locker:
    """Connects to the backend that `url` selects and returns a Locker."""

def connect_async(
    url: str,
    *,
    poll_interval: Optional[_Seconds] = None,
    operation_timeout: Optional[_Seconds] = None,
    metrics: bool = False,
    tracing: bool = False,
) -> Awaitable[Locker]:
    """Awaitable `connect`."""

@final
class _Entering:
    """Internal: what an `async with` acquire yields before its task receives it
    (`fencelock._scope.entered`); a lease never received is released."""

    def receive(self) -> Any:
        """Records the block's lease in its Lock's table; what `async with ... as x` binds."""

@final
class Locker:
    """A client bound to one backend, made by `fencelock.connect(url)`."""

    @property
    def closed(self) -> bool:
        """Whether `close()` was called (True in a forked child, where this Locker cannot be used)."""
    @property
    def url(self) -> str:
        """The URL, with any password redacted."""
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
    ) -> Lock[Lease]:
        """A lock on `name`, to use with `with` or `async with`; nothing is sent until it is entered.
        The block gets the Lease; leaving it releases the lock. Leaving after the lease was lost
        raises `fencelock.Lost` (unless another exception is already propagating); leaving after an
        explicit `lease.release()` is quiet.

        Options: ttl (lease length in seconds or a timedelta, default 30), wait (how long to block;
        None = forever, 0 = try once), auto_renew (renew every ttl/3, default True), max_hold (stop
        renewing after this long), holder (text stored with the lock), reentrant (re-enter in the
        same thread or task), pipelined_release (release returns once the command is sent; its reply
        is checked in the background and a lock found no longer ours sets `lost`).
        """
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
    ) -> Lock[Leadership]:
        """Leadership of the election `name`, to use with `with` or `async with`: entering campaigns
        (waits to acquire the election's lock, up to `wait`, forever by default) and yields a
        `fencelock.Leadership` whose `term` is larger than every earlier leader's; leaving resigns.
        Leaving after leadership was lost raises `fencelock.Lost`. Options as for `lock()`, except
        `reentrant` (a leader never campaigns again); with `pipelined_release`, resigning returns
        once the release is sent.
        """
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
    ) -> _T:
        """Campaigns for `name`, calls `fn(leadership)` once leading, resigns when it returns and
        returns what it returned. `fn` should watch `leadership.lost` (or call
        `leadership.raise_if_lost()` between steps) and stop once it is set; if leadership was lost
        meanwhile, `fencelock.Lost` is raised after `fn` returns. Options as for `leadership()`.
        """
    def leader(self, name: str) -> Optional[Leader]:
        """Who leads the election `name` now (a `fencelock.Leader` with `term` and `holder`), or None;
        read without campaigning.
        """
    def leader_async(self, name: str) -> Awaitable[Optional[Leader]]:
        """Awaitable `leader`."""
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
    ) -> Lease:
        """Acquires `name` and returns its Lease, waiting up to `wait` seconds (forever by default).
        Raises `fencelock.Timeout` when the wait ends first. The GIL is released while waiting, and
        Ctrl-C interrupts the wait, leaving nothing behind. Options as for `lock()`.
        """
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
    ) -> Optional[Lease]:
        """Tries once: the Lease, or None when somebody else holds the lock."""
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
    ) -> Awaitable[Lease]:
        """Awaitable `acquire`: `lease = await locker.acquire_async(name, ...)`. Cancelling the await
        stops waiting and leaves nothing behind.
        """
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
    ) -> Awaitable[Optional[Lease]]:
        """Awaitable `try_acquire`."""
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
    def inspect(self, name: str) -> LockInfo:
        """Who holds `name`, read without acquiring it."""
    def inspect_async(self, name: str) -> Awaitable[LockInfo]:
        """Awaitable `inspect`."""
    def list(self, prefix: Optional[str] = None) -> LockList:
        """The locks held now whose names start with `prefix` (plain text, no wildcards; "" for every
        lock), read without acquiring, sorted by name: at most 1000, with `truncated` set when more
        matched.
        """
    def list_async(self, prefix: Optional[str] = None) -> Awaitable[LockList]:
        """Awaitable `list`."""
    def force_release(self, name: str) -> None:
        """Frees `name` whoever holds it. DANGEROUS: for an operator clearing a holder that is dead or
        stuck. The holder is told it lost the lock at its next renewal (on ZooKeeper at once); until
        then two holders may run, and only fenced writes stay safe. Raises `fencelock.NotHeld` when
        nobody held it.
        """
    def force_release_async(self, name: str) -> Awaitable[None]:
        """Awaitable `force_release`."""
    def events(self) -> EventSubscription:
        """A subscription to the lifecycle events of this Locker's leases from now on, to read from a
        thread of your own: `for event in locker.events(): ...`.
        """
    def on_event(
        self,
        callback: Callable[[LockEvent], object],
        kinds: Optional[Union[str, Sequence[str]]] = None,
    ) -> EventSubscription:
        """Calls `callback(event)` on a background thread for each lifecycle event of this Locker's
        leases ("acquired", "renewed", "renewal_retried", "suspended", "resumed", "lost",
        "released", and a fence's "deployment_mismatch"), in order for each lease; with `kinds`,
        only for those. Returns the subscription: `close()` it to stop. Exceptions in the callback
        are logged to the `fencelock` logger.
        """
    def close(self) -> None:
        """Releases every lease this Locker still holds and closes its connections; later calls raise
        `fencelock.Closed`. Closing twice is harmless. In a process forked from the one that
        connected, it does nothing (the parent's locks are the parent's).
        """
    def close_async(self) -> Awaitable[None]:
        """Awaitable `close`."""
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
    def name(self) -> str:
        """The lock's name."""
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
    def name(self) -> str:
        """The lock's name."""
    @property
    def token(self) -> int:
        """The fencing token: an int, strictly increasing per lock name, below 2**63. Only a mutex's or
        a write lease's token may guard a `Fence`: readers and a semaphore's permits hold the name
        at once.
        """
    @property
    def mode(self) -> _LeaseMode:
        """How this lease holds its name: "exclusive" (a mutex's or an election's), "permit" (a
        semaphore's), "read" or "write" (a read-write lock's). Only "exclusive" and "write"
        leases may guard a Fence."""
    @property
    def expires_at(self) -> Optional[datetime]:
        """When the backend will expire the lease unless it is renewed (this client's estimate), as a
        UTC-aware datetime; None on backends without a ttl.
        """
    @property
    def valid_until(self) -> datetime:
        """The client deadline (UTC-aware): after it this client counts the lease lost unless a
        renewal succeeds first. It moves forward with each renewal; on backends with a ttl it
        comes before `expires_at`."""
    @property
    def is_lost(self) -> bool:
        """Whether the lease is lost; computed from the client deadline on every read."""
    @property
    def is_held(self) -> bool:
        """Whether the lease is still held: neither released nor lost (False in a forked child)."""
    @property
    def renewal_failing(self) -> bool:
        """Whether the last renewal failed (renewals are retried until the client deadline)."""
    @property
    def is_suspended(self) -> bool:
        """Whether the lease's connection is down (ZooKeeper's "suspended") or its last renewal
        failed: stop writing until it clears; the lease is lost at its deadline otherwise."""
    @property
    def lost(self) -> LostSignal:
        """The signal set when this lease is lost: `lost.is_set()`, `lost.wait(timeout)`, `await
        lease.lost`.
        """
    def raise_if_lost(self) -> None:
        """Returns if the lease is held. Raises `fencelock.Lost` if it was lost, `fencelock.NotHeld`
        after release, `fencelock.Closed` in a process forked from the one that acquired it. Call it
        between steps of long work.
        """
    def extend(self, ttl: Optional[_Seconds] = None) -> None:
        """Sets a new ttl from now: `ttl` seconds (int, float or timedelta), or the current ttl when
        None. Raises NotHeld after release, Lost after a loss.
        """
    def extend_async(self, ttl: Optional[_Seconds] = None) -> Awaitable[None]:
        """Awaitable `extend`."""
    def release(self) -> None:
        """Releases the lock. Raises NotHeld if it was already released, Lost if the lease was lost
        first (work done since may have run without the lock). Ctrl-C does not cut a release short:
        it finishes in the background.
        """
    def release_async(self) -> Awaitable[None]:
        """Awaitable `release`; cancelling the await does not cut the release short."""
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
    def extend_async(self, ttl: Optional[_Seconds] = None) -> Awaitable[None]:
        """Awaitable `extend`."""
    def release(self) -> None:
        """Releases every part, whatever happens to the others; raises Lost if any part was
        lost first, else NotHeld if any was already released."""
    def release_async(self) -> Awaitable[None]:
        """Awaitable `release`; cancelling the await does not cut the release short."""
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
    def reason(self) -> Optional[str]:
        """Why the lease was lost: "expired", "taken_over" or "session_expired"; None while held."""
    def is_set(self) -> bool:
        """Whether the lease has been lost."""
    def wait(self, timeout: Optional[_Seconds] = None) -> bool:
        """Blocks until the lease is lost or `timeout` seconds (int, float or timedelta) pass; returns
        whether it is lost. None waits forever. The GIL is released while waiting.
        """
    def __await__(self) -> Generator[Any, None, bool]: ...

@final
class LockInfo:
    """What a backend knows about one lock, read by `locker.inspect(name)`."""

    @property
    def name(self) -> str:
        """The lock's name."""
    @property
    def held(self) -> bool:
        """Whether somebody holds the lock now."""
    @property
    def token(self) -> Optional[int]:
        """The last token minted for this name, in any mode (a mutex holder's, while held); None if
        never taken.
        """
    @property
    def holder(self) -> Optional[dict[str, Any]]:
        """A mutex holder's description while held: a dict with some of host, pid, language, text (a
        semaphore's or read-write lock's holders are in `leases`).
        """
    @property
    def time_left(self) -> Optional[float]:
        """Seconds left on the backend's clock while a mutex is held; None when free or unknown."""
    @property
    def waiters(self) -> list[dict[str, Any]]:
        """The waiters behind the holders, first in line first, where the backend keeps them
        (ZooKeeper's queue; a waiting semaphore permit or writer on the other backends; empty for a
        mutex's waiters there, which do not register): dicts with `node` and, when known, `holder`.
        """
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
    def truncated(self) -> bool:
        """More than 1000 locks matched: only the first ones by name are here."""
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> LockInfo: ...
    def __iter__(self) -> Iterator[LockInfo]: ...

@final
class LockEvent:
    """One thing that happened to one lease (`locker.on_event`, `locker.events()`)."""

    @property
    def kind(self) -> str:
        """ "acquired", "renewed", "renewal_retried", "suspended", "resumed", "lost", "released" or
        "deployment_mismatch" (a fence's warning, docs/design.md §3.7).
        """
    @property
    def name(self) -> str:
        """The lock's name."""
    @property
    def token(self) -> int:
        """The lease's fencing token."""
    @property
    def backend(self) -> str:
        """The backend: "redis", "zookeeper", "postgres", ..."""
    @property
    def timestamp(self) -> float:
        """When it happened, in seconds since the epoch (as `time.time()`)."""
    @property
    def reason(self) -> Optional[str]:
        """Why: the loss reason, the renewal error, ...; None when there is nothing to say."""

@final
class EventSubscription:
    """The lifecycle events of a Locker's leases; iterate it or call `next(timeout)`."""

    def next(self, timeout: Optional[_Seconds] = None) -> Optional[LockEvent]:
        """The next event, waiting up to `timeout` seconds (None: until there is one or the
        subscription ends). Returns None on timeout or once ended and drained.
        """
    def __iter__(self) -> Self: ...
    def __next__(self) -> LockEvent: ...
    @property
    def dropped(self) -> int:
        """How many events were dropped because 10,000 waited unread."""
    @property
    def closed(self) -> bool:
        """Whether it ended (closed, or its Locker closed)."""
    def close(self) -> None:
        """Unsubscribes; events already queued can still be read."""

@final
class _LogSubscription:
    def __new__(cls, level: int) -> Self: ...
    def next(self, timeout: float) -> Optional[tuple[int, str, Optional[str], float]]:
        """The next record as `(levelno, message, lock or None, created)`, waiting up to `timeout`
        seconds with the GIL released; None on timeout.
        """
    def set_level(self, level: int) -> None:
        """Follows the `fencelock` logger's effective level."""
    def close(self) -> None: ...

@final
class Leadership:
    """Leadership of an election; `term` is its lease's fencing token."""

    @property
    def name(self) -> str:
        """The election's name."""
    @property
    def term(self) -> int:
        """This leader's term: larger than every earlier leader's."""
    @property
    def is_leader(self) -> bool:
        """Still the leader: neither resigned nor lost."""
    @property
    def lease(self) -> Lease:
        """The lease behind the leadership, for fences (its token is the term)."""
    @property
    def lost(self) -> LostSignal:
        """Set the moment leadership is lost: `lost.is_set()`, `lost.wait(timeout)`, `await lost`."""
    def raise_if_lost(self) -> None:
        """Returns while leading; raises `fencelock.Lost` once leadership was lost, `NotHeld` after
        `resign()`.
        """
    def resign(self) -> None:
        """Steps down so another candidate can lead. Raises `fencelock.Lost` if leadership was lost
        first, `NotHeld` if already resigned.
        """
    def resign_async(self) -> Awaitable[None]:
        """Awaitable `resign`."""

@final
class Leader:
    """Who leads an election now, from `locker.leader(name)`."""

    @property
    def term(self) -> int:
        """The leader's term (its lease's fencing token)."""
    @property
    def holder(self) -> Optional[dict[str, Any]]:
        """The leader's description: a dict with some of host, pid, language, text."""

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
        tracing: bool = False,
    ) -> Fence:
        """Opens the fence of `resource` in the database at `url` (sqlite:///abs/path.db today); the
        fence table is created on first use. Options as for `connect()`.
        """
    @staticmethod
    def open_async(
        url: str,
        resource: str,
        *,
        poll_interval: Optional[_Seconds] = None,
        operation_timeout: Optional[_Seconds] = None,
        tracing: bool = False,
    ) -> Awaitable[Fence]:
        """Awaitable `open`."""
    @property
    def resource(self) -> str:
        """The resource this fence guards."""
    def fenced_execute(
        self, token: Union[Lease, int], statements: Sequence[_SqlStatement]
    ) -> list[int]:
        """Runs `statements` (a list of `(sql, params)`; params a list of None, int, float, str or
        bytes) in one transaction if `token` (a Lease or an int) is at least the highest this fence
        has accepted, and records it as the highest. Returns the rows each statement changed. Raises
        StaleToken (nothing written) when a newer holder has written, Lost for a lease past its
        deadline (nothing sent), BackendError when a statement fails (all rolled back).
        """
    def fenced_execute_async(
        self, token: Union[Lease, int], statements: Sequence[_SqlStatement]
    ) -> Awaitable[list[int]]:
        """Awaitable `fenced_execute`."""
    def fenced_set(self, token: Union[Lease, int], key: str, value: Union[bytes, str]) -> None:
        """Sets `key` to `value` (bytes or str) if `token` (a Lease or an int) is at least the highest
        this fence has accepted, in one script (Redis fences). Raises StaleToken (nothing written)
        when a newer holder has written, Lost for a lease past its deadline (nothing sent),
        InvalidArgument on a SQL fence (use `fenced_execute`).
        """
    def fenced_set_async(
        self, token: Union[Lease, int], key: str, value: Union[bytes, str]
    ) -> Awaitable[None]:
        """Awaitable `fenced_set`."""
    def check(self, token: Union[Lease, int]) -> None:
        """Advisory: returns if `token` would be accepted now, raises StaleToken if not. A check
        followed by a separate write protects nothing; use `fenced_execute` for the write.
        """
    def check_async(self, token: Union[Lease, int]) -> Awaitable[None]:
        """Awaitable `check`."""
    def query(
        self, sql: str, params: Optional[Sequence[_SqlParam]] = None
    ) -> list[tuple[Union[None, int, float, str, bytes], ...]]:
        """Reads the fence's database: runs `sql` with `params` (a list of None, int, float, str or
        bytes) read-only, outside any fenced write, and returns the rows as a list of tuples. For a
        SQLite fence, read your data this way rather than with `sqlite3`: a second SQLite library in
        the process drops fencelock's file locks when it closes the file, and SQLite may then delete
        a live WAL file. Raises InvalidArgument for a statement that writes (nothing is written;
        write with `fenced_execute`) and on a Redis fence, BackendError for a statement the database
        rejects or a column that is not an integer, a float, text or bytes (CAST it in the query).
        """
    def query_async(
        self, sql: str, params: Optional[Sequence[_SqlParam]] = None
    ) -> Awaitable[list[tuple[Union[None, int, float, str, bytes], ...]]]:
        """Awaitable `query`."""
    def highest(self) -> Optional[int]:
        """The highest token accepted so far, or None."""
    def highest_async(self) -> Awaitable[Optional[int]]:
        """Awaitable `highest`."""
    def close(self) -> None:
        """Closes the fence's connections."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...
