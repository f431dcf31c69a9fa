"""The recipes of python/recipes/ run against the real frameworks, installed by run-tests.sh:
Celery with prefork workers on the Redis broker, a Django management command, a FastAPI lifespan
and gunicorn --preload. Each recipe's lock is real (Redis where the recipe is fleet-wide)."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
from conftest import LONG, server_url

import fencelock

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


@pytest.fixture
def recipes_on_path() -> Iterator[None]:
    sys.path.insert(0, str(RECIPES))
    yield
    sys.path.remove(str(RECIPES))


def redis_url() -> str:
    """The fleet-wide recipes' lock server (conftest.server_url: skipped where not tested)."""
    return server_url("redis")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def recipe_env(**extra: str) -> Dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(RECIPES), **extra)
    return env


def test_celery_prefork_workers_run_the_task_once_at_a_time() -> None:
    pytest.importorskip("celery")
    url = redis_url()
    broker = f"{url}/2"
    env = recipe_env(
        CELERY_BROKER_URL=broker,
        CELERY_RESULT_BACKEND=f"{url}/3",
        FENCELOCK_URL=url,
    )
    queue = f"recipe-{os.getpid()}-{time.time_ns()}"
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_once", "worker", "--pool=prefork"]
            + ["--concurrency=2", "-Q", queue, "-n", f"w{i}-{queue}@%h", "--loglevel=WARNING"],
            env=env,
            cwd=RECIPES,
        )
        for i in range(2)
    ]
    try:
        sys.path.insert(0, str(RECIPES))
        os.environ.update(CELERY_BROKER_URL=broker, CELERY_RESULT_BACKEND=f"{url}/3")
        import celery_once

        # Wait until both workers answer, so the tasks meet four worker processes.
        deadline = time.monotonic() + LONG * 2
        while True:
            replies = celery_once.app.control.ping(timeout=1.0) or []
            names = {name for reply in replies for name in reply if queue in name}
            if len(names) == 2:
                break
            assert time.monotonic() < deadline, f"workers did not start: {replies}"
        sent = [celery_once.nightly_report.apply_async(args=[0.3], queue=queue) for _ in range(12)]
        results: List[Dict[str, Any]] = [r.get(timeout=LONG * 2) for r in sent]
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(LONG)
        if str(RECIPES) in sys.path:
            sys.path.remove(str(RECIPES))
    ran = sorted((r for r in results if r["ran"]), key=lambda r: r["start"])
    assert ran, "no run took the lock"
    assert len(ran) < len(results), "every run took the lock: they never met"
    for before, after in zip(ran, ran[1:]):
        assert before["end"] <= after["start"], "two runs held the lock at once"
        assert before["token"] < after["token"]
    assert len({r["pid"] for r in results}) > 1, "one worker process ran every task"


def test_a_django_management_command_runs_under_the_lock(tmp_path: Path) -> None:
    pytest.importorskip("django")
    url = f"sqlite://{tmp_path / 'locks.db'}"
    script = f"""
import sys
import django
from django.conf import settings
from django.core.management import call_command
settings.configure(INSTALLED_APPS=["djangoapp"], FENCELOCK_URL={url!r})
django.setup()
call_command("nightly_report")
"""
    run = [sys.executable, "-c", script]
    done = subprocess.run(run, env=recipe_env(), capture_output=True, text=True, timeout=LONG)
    assert done.returncode == 0, done.stderr
    assert "report written under fencing token" in done.stdout
    with fencelock.connect(url) as other, other.lock("nightly-report", ttl=30):
        held = subprocess.run(run, env=recipe_env(), capture_output=True, text=True, timeout=LONG)
    assert held.returncode == 0, held.stderr
    assert "another run holds the lock: skipped" in held.stdout


def test_a_fastapi_lifespan_owns_the_locker(tmp_path: Path, recipes_on_path: None) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    os.environ["FENCELOCK_URL"] = f"sqlite://{tmp_path / 'locks.db'}"
    try:
        import fastapi_app

        with TestClient(fastapi_app.app) as client:
            locker = fastapi_app.app.state.locker
            tokens = []
            for _ in range(3):
                answer = client.post("/accounts/17/statements")
                assert answer.status_code == 200, answer.text
                assert answer.json()["account"] == "17"
                tokens.append(int(answer.json()["token"]))
            assert tokens == sorted(set(tokens)), "each request took the lock anew"
            assert not locker.inspect("account-17").held, "released after each request"
        assert locker.closed, "the lifespan closed the Locker at shutdown"
    finally:
        del os.environ["FENCELOCK_URL"]


def test_gunicorn_preload_workers_connect_after_the_fork() -> None:
    pytest.importorskip("gunicorn")
    url = redis_url()
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--preload", "-w", "2", "-c", "gunicorn_conf.py"]
        + ["-b", f"127.0.0.1:{port}", "gunicorn_app:app"],
        env=recipe_env(FENCELOCK_URL=url),
        cwd=RECIPES,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        answers: List[Dict[str, Any]] = []
        errors: List[BaseException] = []
        deadline = time.monotonic() + LONG
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=LONG) as r:
                    answers.append(json.loads(r.read()))
                break
            except OSError:
                assert server.poll() is None, "gunicorn exited"
                assert time.monotonic() < deadline, "gunicorn did not answer"
                time.sleep(0.1)

        def ask() -> None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=LONG) as r:
                    answers.append(json.loads(r.read()))
            except BaseException as e:  # reported below
                errors.append(e)

        askers = [threading.Thread(target=ask) for _ in range(8)]
        for t in askers:
            t.start()
        for t in askers:
            t.join(LONG)
        assert not errors, errors
        tokens = [int(a["token"]) for a in answers]
        assert len(set(tokens)) == len(tokens) == 9, "each request held the lock with a new token"
    finally:
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=LONG)
    assert "Closed" not in stderr, stderr
