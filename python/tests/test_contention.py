"""Eight processes, 25 fenced critical sections each, on one lock and one fence."""

import subprocess
import sys
from pathlib import Path

from conftest import run_sql

PROCESSES = 8
ROUNDS = 25


def test_processes_contend_through_lock_and_fence(tmp_path: Path, url: str) -> None:
    data_path = tmp_path / "data.db"
    run_sql(data_path, "CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
    run_sql(data_path, "INSERT INTO counter VALUES (1, 0)")
    run_sql(
        data_path,
        "CREATE TABLE log (seq INTEGER PRIMARY KEY AUTOINCREMENT, token INTEGER, n INTEGER)",
    )
    (tmp_path / "count").write_text("0")

    worker = Path(__file__).with_name("_contender.py")
    args = [sys.executable, str(worker), url, f"sqlite://{data_path}", str(tmp_path), str(ROUNDS)]
    procs = [
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(PROCESSES)
    ]
    for p in procs:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err.decode()
        assert out.decode().split() == ["done", "0"], "a process found another inside the lock"

    total = PROCESSES * ROUNDS
    assert (tmp_path / "count").read_text() == str(total)
    assert run_sql(data_path, "SELECT n FROM counter WHERE id = 1") == [[total]]
    rows = run_sql(data_path, "SELECT token, n FROM log ORDER BY seq")
    assert [r[1] for r in rows] == list(range(1, total + 1))
    tokens = [r[0] for r in rows]
    assert all(a < b for a, b in zip(tokens, tokens[1:])), "tokens must strictly increase"
