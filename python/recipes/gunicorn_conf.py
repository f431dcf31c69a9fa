"""gunicorn settings for gunicorn_app.py: each worker connects its own Locker after the fork."""

import os
from typing import Any

import fencelock


def post_fork(server: Any, worker: Any) -> None:
    import gunicorn_app

    gunicorn_app.locker = fencelock.connect(os.environ["FENCELOCK_URL"])


def worker_exit(server: Any, worker: Any) -> None:
    import gunicorn_app

    if gunicorn_app.locker is not None:
        gunicorn_app.locker.close()
