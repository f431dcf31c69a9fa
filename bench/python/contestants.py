"""The locks the comparison measures, each behind the same two calls: acquire and release.

Every contestant is built from a plain spec (picklable, so worker processes rebuild it) and uses
each library the way its documentation shows, with its defaults unless the spec says otherwise:
that is what users get. Only the lock's lifetime is set, to the same 30 s everywhere.

Two suites: `default_specs` (mutexes, one holder) and `shared_specs` (semaphores and read locks:
`Spec.kind` "semaphore" takes one of `Spec.permits` permits, "read" the read side of a
read-write lock). For the shared suite, each client makes its recipe object once per name (a
fencelock `Lock`, a kazoo `Semaphore` or `ReadLock`) and enters it on every cycle, as a program
that takes the same semaphore again and again would; kazoo's `Semaphore` checks its path (two
round trips) only on an object's first acquire.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

TTL_SECONDS = 30
#: Permits of every semaphore in the shared suite.
PERMITS = 3


@dataclass(frozen=True)
class Spec:
    """What to build: `library` picks the adapter, `family` groups rivals for the ratios."""

    label: str
    family: str
    library: str
    url: str
    is_fencelock: bool = False
    #: Keyword options of fencelock's acquire (e.g. pipelined_release).
    options: Tuple[Tuple[str, object], ...] = ()
    #: What one acquire takes: "mutex" (the lock), "semaphore" (one of `permits` permits) or
    #: "read" (the read side of a read-write lock).
    kind: str = "mutex"
    #: A semaphore's number of permits (0 for the other kinds).
    permits: int = 0


class Client:
    """One connection (or connection pool) of one library, used by one process."""

    def acquire(self, name: str) -> Any:
        raise NotImplementedError

    def release(self, handle: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _redis_client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url)


class FencelockClient(Client):
    """A mutex through `locker.acquire`; a permit or a read lock by entering the `Lock` that
    `locker.semaphore(name, permits)` or `locker.read_lock(name)` made (once per name), which is
    what `with locker.semaphore(...)` does."""

    def __init__(self, url: str, options: Dict[str, Any], kind: str = "mutex", permits: int = 0):
        import fencelock

        self.locker = fencelock.connect(url)
        self.options = options
        self.kind = kind
        self.permits = permits
        self.locks: Dict[str, Any] = {}

    def _lock(self, name: str) -> Any:
        lock = self.locks.get(name)
        if lock is None:
            if self.kind == "semaphore":
                lock = self.locker.semaphore(name, self.permits, ttl=TTL_SECONDS, **self.options)
            elif self.kind == "read":
                lock = self.locker.read_lock(name, ttl=TTL_SECONDS, **self.options)
            else:
                raise ValueError(f"unknown kind {self.kind!r}")
            self.locks[name] = lock
        return lock

    def acquire(self, name: str) -> Any:
        if self.kind == "mutex":
            return self.locker.acquire(name, ttl=TTL_SECONDS, **self.options)
        lock = self._lock(name)
        lock.__enter__()
        return lock

    def release(self, handle: Any) -> None:
        if self.kind == "mutex":
            handle.release()
        else:
            handle.__exit__(None, None, None)

    def close(self) -> None:
        self.locker.close()


class RedisPyClient(Client):
    """redis-py's `Lock`: SET NX PX, then a polling retry every 0.1 s (its default) when held."""

    def __init__(self, url: str) -> None:
        self.redis = _redis_client(url)

    def acquire(self, name: str) -> Any:
        lock = self.redis.lock(name, timeout=TTL_SECONDS)
        if not lock.acquire():
            raise RuntimeError("redis-py Lock.acquire returned False with blocking=True")
        return lock

    def release(self, handle: Any) -> None:
        handle.release()

    def close(self) -> None:
        self.redis.close()


class PythonRedisLockClient(Client):
    """python-redis-lock: SET NX EX, waiters block on BLPOP of a per-lock signal list."""

    def __init__(self, url: str) -> None:
        self.redis = _redis_client(url)

    def acquire(self, name: str) -> Any:
        import redis_lock

        lock = redis_lock.Lock(self.redis, name, expire=TTL_SECONDS)
        if not lock.acquire():
            raise RuntimeError("redis_lock.Lock.acquire returned False with blocking=True")
        return lock

    def release(self, handle: Any) -> None:
        handle.release()

    def close(self) -> None:
        self.redis.close()


class PotteryClient(Client):
    """pottery's `Redlock` over the masters in the URL (comma-separated redis URLs)."""

    def __init__(self, url: str) -> None:
        self.masters = {_redis_client(one) for one in url.split(",")}

    def acquire(self, name: str) -> Any:
        from pottery import Redlock

        lock = Redlock(key=name, masters=self.masters, auto_release_time=TTL_SECONDS)
        if not lock.acquire():
            raise RuntimeError("pottery Redlock.acquire returned False with blocking=True")
        return lock

    def release(self, handle: Any) -> None:
        handle.release()

    def close(self) -> None:
        for master in self.masters:
            master.close()


class KazooClientAdapter(Client):
    """kazoo's `Lock` recipe: ephemeral sequential znodes, a watch on the predecessor."""

    def __init__(self, url: str) -> None:
        from kazoo.client import KazooClient

        hosts = url.split("://", 1)[-1]
        self.client = KazooClient(hosts=hosts)
        self.client.start(timeout=10)
        self.identifier = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def acquire(self, name: str) -> Any:
        lock = self.client.Lock(f"/bench-kazoo/{name}", self.identifier)
        if not lock.acquire():
            raise RuntimeError("kazoo Lock.acquire returned False with blocking=True")
        return lock

    def release(self, handle: Any) -> None:
        handle.release()

    def close(self) -> None:
        self.client.stop()
        self.client.close()


class KazooSemaphoreClient(KazooClientAdapter):
    """kazoo's `Semaphore` (max_leases permits): queues on an internal kazoo `Lock`, then
    creates its lease node when fewer than max_leases exist, watching the lease folder."""

    def __init__(self, url: str, permits: int) -> None:
        super().__init__(url)
        self.permits = permits
        self.recipes: Dict[str, Any] = {}

    def acquire(self, name: str) -> Any:
        semaphore = self.recipes.get(name)
        if semaphore is None:
            semaphore = self.client.Semaphore(
                f"/bench-kazoo/{name}", self.identifier, max_leases=self.permits
            )
            self.recipes[name] = semaphore
        if not semaphore.acquire():
            raise RuntimeError("kazoo Semaphore.acquire returned False with blocking=True")
        return semaphore


class KazooReadLockClient(KazooClientAdapter):
    """kazoo's `ReadLock` (kazoo.recipe.lock): a sequential node, held while no write node
    comes before it."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.recipes: Dict[str, Any] = {}

    def acquire(self, name: str) -> Any:
        lock = self.recipes.get(name)
        if lock is None:
            lock = self.client.ReadLock(f"/bench-kazoo/{name}", self.identifier)
            self.recipes[name] = lock
        if not lock.acquire():
            raise RuntimeError("kazoo ReadLock.acquire returned False with blocking=True")
        return lock


ADAPTERS: Dict[str, Callable[[str], Client]] = {
    "redis-py": RedisPyClient,
    "python-redis-lock": PythonRedisLockClient,
    "pottery": PotteryClient,
    "kazoo": KazooClientAdapter,
}


def build(spec: Spec) -> Client:
    if spec.library == "fencelock":
        return FencelockClient(spec.url, dict(spec.options), spec.kind, spec.permits)
    if spec.kind == "mutex":
        return ADAPTERS[spec.library](spec.url)
    if (spec.library, spec.kind) == ("kazoo", "semaphore"):
        return KazooSemaphoreClient(spec.url, spec.permits)
    if (spec.library, spec.kind) == ("kazoo", "read"):
        return KazooReadLockClient(spec.url)
    raise ValueError(f"no {spec.kind} adapter for {spec.library}")


def _urls(env: Dict[str, str]) -> Dict[str, str]:
    """The servers of tests/servers.sh, or the URLs in the environment."""
    redis_url = env.get("FENCELOCK_TEST_REDIS_URL", "redis://127.0.0.1:6379")
    redlock_url = env.get(
        "FENCELOCK_TEST_REDLOCK_URL",
        "redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005",
    )
    redlock_hosts = redlock_url.split("://", 1)[1].split("?", 1)[0].split(",")
    master_urls = ",".join(f"redis://{host}" for host in redlock_hosts)
    zk_url = env.get("FENCELOCK_TEST_ZK_URL", "zk://127.0.0.1:2181")
    postgres_url = env.get(
        "FENCELOCK_TEST_POSTGRES_URL",
        "postgres://fencelock:fencelock-test@127.0.0.1:5432/fencelock_test",
    )
    mariadb_url = env.get(
        "FENCELOCK_TEST_MARIADB_URL",
        "mariadb://fencelock:fencelock-test@127.0.0.1:3306/fencelock_test",
    )
    sqlite_path = env.get("FENCELOCK_BENCH_SQLITE", "/tmp/fencelock-bench-compare.db")
    return {
        "redis": redis_url,
        "redlock": redlock_url,
        "masters": master_urls,
        "zookeeper": zk_url,
        "postgres": postgres_url,
        "mariadb": mariadb_url,
        "sqlite": f"sqlite://{sqlite_path}",
    }


def _only(specs: List[Spec], only: Optional[List[str]]) -> List[Spec]:
    if only:
        specs = [spec for spec in specs if any(word in spec.label for word in only)]
    return specs


def default_specs(env: Dict[str, str], only: Optional[List[str]] = None) -> List[Spec]:
    """Every mutex contestant, on the servers of tests/servers.sh (or the URLs in the
    environment)."""
    urls = _urls(env)
    redis_url, redlock_url, master_urls = urls["redis"], urls["redlock"], urls["masters"]
    zk_url, postgres_url, mariadb_url = urls["zookeeper"], urls["postgres"], urls["mariadb"]
    specs = [
        Spec("fencelock redis", "redis", "fencelock", redis_url, True),
        Spec(
            "fencelock redis, release pipelined",
            "redis",
            "fencelock",
            redis_url,
            True,
            (("pipelined_release", True),),
        ),
        Spec("redis-py Lock", "redis", "redis-py", redis_url),
        Spec("python-redis-lock", "redis", "python-redis-lock", redis_url),
        Spec("pottery Redlock, 1 master", "redis", "pottery", redis_url),
        Spec("fencelock redlock, 5 masters", "redlock", "fencelock", redlock_url, True),
        Spec(
            "fencelock redlock, 5 masters, release pipelined",
            "redlock",
            "fencelock",
            redlock_url,
            True,
            (("pipelined_release", True),),
        ),
        Spec("pottery Redlock, 5 masters", "redlock", "pottery", master_urls),
        Spec("fencelock zookeeper", "zookeeper", "fencelock", zk_url, True),
        Spec("kazoo Lock", "zookeeper", "kazoo", zk_url),
        Spec("fencelock postgres", "sql", "fencelock", postgres_url, True),
        Spec("fencelock mariadb", "sql", "fencelock", mariadb_url, True),
        Spec("fencelock sqlite", "sql", "fencelock", urls["sqlite"], True),
    ]
    return _only(specs, only)


def cycle_specs(env: Dict[str, str], only: Optional[List[str]] = None) -> List[Spec]:
    """The uncontended cycle on one Redis master (suite "cycle"): on a master without replicas,
    where fencelock makes the same two round trips as redis-py's Lock; and fencelock on the test
    server whose replica it waits for (`WAIT 1` after each acquire), which redis-py does not."""
    plain = env.get("FENCELOCK_BENCH_REDIS_URL", "redis://127.0.0.1:7001")
    replicated = _urls(env)["redis"]
    specs = [
        Spec("fencelock redis", "redis", "fencelock", plain, True),
        Spec(
            "fencelock redis, release pipelined",
            "redis",
            "fencelock",
            plain,
            True,
            (("pipelined_release", True),),
        ),
        Spec("redis-py Lock", "redis", "redis-py", plain),
        Spec(
            "fencelock redis, WAIT 1 for its replica", "replicated", "fencelock", replicated, True
        ),
    ]
    return _only(specs, only)


def _semaphore(label: str, library: str, family: str, url: str) -> Spec:
    ours = library == "fencelock"
    return Spec(label, family, library, url, ours, kind="semaphore", permits=PERMITS)


def _read_lock(label: str, library: str, family: str, url: str) -> Spec:
    return Spec(label, family, library, url, library == "fencelock", kind="read")


def shared_specs(env: Dict[str, str], only: Optional[List[str]] = None) -> List[Spec]:
    """Every semaphore and read-lock contestant, in the order they take turns: each rival right
    after the fencelock contestant it is compared with. Redis has no rival here: redis-py,
    python-redis-lock and pottery offer no semaphore and no read-write lock (bench/RESULTS.md)."""
    urls = _urls(env)
    redis_url, zk_url = urls["redis"], urls["zookeeper"]
    zk = ("zookeeper", zk_url)
    specs = [
        _semaphore("fencelock redis semaphore", "fencelock", "redis", redis_url),
        _semaphore("fencelock zookeeper semaphore", "fencelock", *zk),
        _semaphore("kazoo Semaphore", "kazoo", *zk),
        _read_lock("fencelock redis read lock", "fencelock", "redis", redis_url),
        _read_lock("fencelock zookeeper read lock", "fencelock", *zk),
        _read_lock("kazoo ReadLock", "kazoo", *zk),
    ]
    return _only(specs, only)
