"""The locks the comparison measures, each behind the same two calls: acquire and release.

Every contestant is built from a plain spec (picklable, so worker processes rebuild it) and uses
each library the way its documentation shows, with its defaults unless the spec says otherwise:
that is what users get. Only the lock's lifetime is set, to the same 30 s everywhere.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

TTL_SECONDS = 30


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
    def __init__(self, url: str, options: Dict[str, Any]) -> None:
        import fencelock

        self.locker = fencelock.connect(url)
        self.options = options

    def acquire(self, name: str) -> Any:
        return self.locker.acquire(name, ttl=TTL_SECONDS, **self.options)

    def release(self, handle: Any) -> None:
        handle.release()

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


ADAPTERS: Dict[str, Callable[[str], Client]] = {
    "redis-py": RedisPyClient,
    "python-redis-lock": PythonRedisLockClient,
    "pottery": PotteryClient,
    "kazoo": KazooClientAdapter,
}


def build(spec: Spec) -> Client:
    if spec.library == "fencelock":
        return FencelockClient(spec.url, dict(spec.options))
    return ADAPTERS[spec.library](spec.url)


def default_specs(env: Dict[str, str], only: Optional[List[str]] = None) -> List[Spec]:
    """Every contestant, on the servers of tests/servers.sh (or the URLs in the environment)."""
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
        Spec("fencelock sqlite", "sql", "fencelock", f"sqlite://{sqlite_path}", True),
    ]
    if only:
        specs = [spec for spec in specs if any(word in spec.label for word in only)]
    return specs
