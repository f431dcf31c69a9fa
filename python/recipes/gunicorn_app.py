"""Recipe: a WSGI app under gunicorn ``--preload``, where the app module is imported once in
the master and the workers are forked from it. A Locker made at import would be the master's,
and raises ``fencelock.Closed`` in every worker; so each worker connects its own in gunicorn's
``post_fork`` hook (gunicorn_conf.py), and the app reads it from there.

    FENCELOCK_URL=redis://127.0.0.1:6379 gunicorn --preload -w 2 -c gunicorn_conf.py gunicorn_app:app
"""

import json
import os
from typing import Any, Callable, Iterable, Optional

import fencelock

#: This worker's Locker, set by ``post_fork`` (gunicorn_conf.py).
locker: Optional[fencelock.Locker] = None


def app(environ: Any, start_response: Callable[..., Any]) -> Iterable[bytes]:
    assert locker is not None, "post_fork connects each worker's Locker"
    with locker.lock("nightly-report", ttl=30, wait=10) as lease:
        body = json.dumps({"pid": os.getpid(), "token": str(lease.token)}).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]
