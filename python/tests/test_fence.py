"""Fence: the guarded write, stale tokens, advisory checks and bad statements."""

import asyncio
from pathlib import Path
from typing import Any, List

import pytest
from conftest import run_sql

import fencelock


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "data.db"
    run_sql(path, "CREATE TABLE kv (k TEXT PRIMARY KEY, v)")
    return path


def rows(path: Path) -> List[Any]:
    return [tuple(r) for r in run_sql(path, "SELECT k, v FROM kv ORDER BY k")]


def test_fenced_execute_with_leases_and_tokens(locker: fencelock.Locker, table: Path) -> None:
    with fencelock.Fence.open(f"sqlite://{table}", "kv") as fence:
        assert fence.resource == "kv" and fence.highest() is None
        first = locker.acquire("writer")
        first.release()
        second = locker.acquire("writer")
        changed = fence.fenced_execute(
            second,
            [
                ("INSERT INTO kv VALUES (?, ?)", ["a", 1]),
                "INSERT INTO kv VALUES ('b', NULL)",
                ("UPDATE kv SET v = v + 1",),
            ],
        )
        assert changed == [1, 1, 2]
        assert fence.highest() == second.token
        fence.check(second)
        # The older holder's write is refused, and nothing of it is written.
        with pytest.raises(fencelock.StaleToken, match="newer token"):
            fence.fenced_execute(first.token, [("INSERT INTO kv VALUES ('c', 3)", [])])
        with pytest.raises(fencelock.StaleToken):
            fence.check(first.token)
        # A released lease cannot be used as a token: nothing is sent.
        with pytest.raises(fencelock.NotHeld):
            fence.fenced_execute(first, [])
        assert rows(table) == [("a", 2), ("b", None)]
        second.release()


def test_failed_statement_rolls_everything_back(locker: fencelock.Locker, table: Path) -> None:
    with fencelock.Fence.open(f"sqlite://{table}", "kv") as fence, locker.lock("w") as lease:
        with pytest.raises(fencelock.BackendError, match="nothing was written"):
            fence.fenced_execute(
                lease,
                [("INSERT INTO kv VALUES ('x', 1)", []), ("INSERT INTO nowhere VALUES (1)", [])],
            )
        assert rows(table) == []
        assert fence.highest() is None


def test_parameter_types(locker: fencelock.Locker, table: Path) -> None:
    with fencelock.Fence.open(f"sqlite://{table}", "kv") as fence, locker.lock("types") as lease:
        for k, v in [
            ("i", 7),
            ("f", 1.5),
            ("s", "text"),
            ("b", b"\x00\x01"),
            ("n", None),
            ("t", True),
        ]:
            fence.fenced_execute(lease, [("INSERT INTO kv VALUES (?, ?)", (k, v))])
        assert dict(rows(table)) == {"i": 7, "f": 1.5, "s": "text", "b": "0001", "n": None, "t": 1}


BAD_FENCE_CALLS = {
    "token-str": ("5", [], "token must be a fencelock.Lease or an int"),
    "token-negative": (-1, [], "between 0 and 2\\*\\*63"),
    "token-too-big": (2**63, [], "between 0 and 2\\*\\*63"),
    "token-bool": (True, [], "not bool"),
    "statements-str": (5, "UPDATE kv SET v = 1", "list of \\(sql, params\\) pairs"),
    "params-str": (5, [("UPDATE kv SET v = ?", "1")], "must be a list or tuple"),
    "param-object": (5, [("UPDATE kv SET v = ?", [object()])], "parameter 1 of statement 1"),
    "param-huge-int": (5, [("UPDATE kv SET v = ?", [2**70])], "64 bits"),
    "statement-int": (5, [42], "statement 1 must be"),
    "sql-bytes": (5, [(b"UPDATE kv SET v = 1", [])], "sql of statement 1 must be a str"),
}


@pytest.mark.parametrize(
    "token,statements,fragment", BAD_FENCE_CALLS.values(), ids=BAD_FENCE_CALLS.keys()
)
def test_bad_fence_calls(table: Path, token: object, statements: object, fragment: str) -> None:
    with fencelock.Fence.open(f"sqlite://{table}", "kv") as fence:
        with pytest.raises(fencelock.InvalidArgument, match=fragment):
            fence.fenced_execute(token, statements)  # type: ignore[arg-type]


def test_bad_fence_resource(table: Path) -> None:
    with pytest.raises(fencelock.InvalidArgument, match="fence resource name"):
        fencelock.Fence.open(f"sqlite://{table}", "")
    with pytest.raises(fencelock.InvalidArgument, match="must be a str"):
        fencelock.Fence.open(f"sqlite://{table}", None)  # type: ignore[arg-type]


def test_fence_refuses_tokens_of_another_lock(locker: fencelock.Locker, table: Path) -> None:
    with fencelock.Fence.open(f"sqlite://{table}", "kv") as fence:
        with locker.lock("one") as lease:
            fence.fenced_execute(lease, [])
        with locker.lock("two") as other:
            with pytest.raises(fencelock.InvalidArgument, match="another lock"):
                fence.fenced_execute(other, [])


def test_fence_async(locker: fencelock.Locker, table: Path) -> None:
    async def main() -> None:
        fence = await fencelock.Fence.open_async(f"sqlite://{table}", "kv")
        async with locker.lock("async-writer") as lease:
            assert await fence.fenced_execute_async(
                lease, [("INSERT INTO kv VALUES ('z', 26)", [])]
            ) == [1]
            await fence.check_async(lease)
            assert await fence.highest_async() == lease.token
        fence.close()

    asyncio.run(main())
    assert rows(table) == [("z", 26)]


def test_lost_lease_is_refused_before_anything_is_sent(
    locker: fencelock.Locker, table: Path, db_path: Path
) -> None:
    from conftest import LONG, take_over

    with fencelock.Fence.open(f"sqlite://{table}", "kv") as fence:
        lease = locker.acquire("doomed", ttl=0.6)
        take_over(db_path, "doomed")
        assert lease.lost.wait(LONG)
        with pytest.raises(fencelock.Lost):
            fence.fenced_execute(lease, [("INSERT INTO kv VALUES ('late', 1)", [])])
        with pytest.raises(fencelock.Lost):
            fence.check(lease)
        assert fence.highest() is None
    assert rows(table) == []


def test_query_reads_the_fence_database_and_never_writes(
    locker: fencelock.Locker, table: Path
) -> None:
    with fencelock.Fence.open(f"sqlite://{table}", "kv") as fence, locker.lock("reader") as lease:
        values = [("i", 7), ("f", 1.5), ("s", "text"), ("b", b"\x00\xff"), ("n", None)]
        fence.fenced_execute(lease, [("INSERT INTO kv VALUES (?, ?)", kv) for kv in values])
        assert fence.query("SELECT k, v FROM kv ORDER BY k") == sorted(values, key=lambda kv: kv[0])
        assert fence.query("SELECT v FROM kv WHERE k = ?", ["i"]) == [(7,)]
        assert fence.query("SELECT v FROM kv WHERE k = ?", ("nope",)) == []
        # A write is refused, and nothing of it lands.
        with pytest.raises(fencelock.InvalidArgument, match="fenced_execute"):
            fence.query("DELETE FROM kv")
        assert len(fence.query("SELECT k FROM kv")) == len(values)
        with pytest.raises(fencelock.BackendError):
            fence.query("SELECT * FROM nowhere")
        with pytest.raises(fencelock.InvalidArgument, match="parameter 1 of the query"):
            fence.query("SELECT ?", [object()])  # type: ignore[list-item]
        with pytest.raises(fencelock.InvalidArgument, match="list or tuple"):
            fence.query("SELECT ?", "i")  # type: ignore[arg-type]

        async def read() -> object:
            return await fence.query_async("SELECT v FROM kv WHERE k = ?", ["s"])

        assert asyncio.run(read()) == [("text",)]


def test_a_process_reading_its_lock_file_through_a_fence_loses_no_write(tmp_path: Path) -> None:
    # python/CORE_REQUESTS.md's reproduction, read through the fence instead of sqlite3: with a
    # second SQLite library in the process, closing its connection dropped fencelock's file
    # locks, SQLite deleted the live WAL file, and "b" and "c" never reached the file.
    path = tmp_path / "locks.db"
    locker = fencelock.connect(f"sqlite://{path}")
    with fencelock.Fence.open(f"sqlite://{path}", "reads") as fence:
        seen = []
        for name in ("a", "b", "c"):
            locker.acquire(name).release()
            rows = fence.query("SELECT name FROM fencelock_locks ORDER BY name")
            seen.append([row[0] for row in rows])
        assert seen == [[b"a"], [b"a", b"b"], [b"a", b"b", b"c"]]
        # Another process sees every write: none went to an unlinked file.
        names = sorted(row[0] for row in run_sql(path, "SELECT name FROM fencelock_locks"))
        assert names == [b"a".hex(), b"b".hex(), b"c".hex()]
    locker.close()
