"""Recipe: a Celery task that runs once at a time, fleet-wide.

Each worker process connects its own Locker after the fork (``worker_process_init``): a Locker
made before ``fork()`` raises ``fencelock.Closed`` in the child. A run that finds the lock held
skips, as a periodic job wants (another worker is doing it); to queue instead, take
``locker.lock(name, wait=...)``.

    CELERY_BROKER_URL=redis://127.0.0.1:6379/2 FENCELOCK_URL=redis://127.0.0.1:6379 \\
        celery -A celery_once worker --pool=prefork --concurrency=2
"""

import os
import time
from typing import Any, Dict, Optional

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown

import fencelock

app = Celery(
    "celery_once",
    broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/2"),
    backend=os.environ.get("CELERY_RESULT_BACKEND", "redis://127.0.0.1:6379/3"),
)
locker: Optional[fencelock.Locker] = None


@worker_process_init.connect
def connect_locker(**_: Any) -> None:
    global locker
    locker = fencelock.connect(os.environ.get("FENCELOCK_URL", "redis://127.0.0.1:6379"))


@worker_process_shutdown.connect
def close_locker(**_: Any) -> None:
    if locker is not None:
        locker.close()


@app.task
def nightly_report(seconds: float) -> Dict[str, Any]:
    assert locker is not None, "the worker process connects its Locker at start"
    lease = locker.try_acquire("nightly-report", ttl=30)
    if lease is None:
        return {"ran": False, "pid": os.getpid()}
    with lease:
        started = time.time()
        time.sleep(seconds)  # the report's work, holding the lock
        return {
            "ran": True,
            "pid": os.getpid(),
            "token": lease.token,
            "start": started,
            "end": time.time(),
        }
