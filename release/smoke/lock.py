"""Smoke test of the installed wheel: two lockers on one SQLite file, the second is refused while
the first holds the lock, and the next holder gets a larger token. Exits non-zero on any failure."""

import sys
import tempfile

import fencelock

url = f"sqlite://{tempfile.mkdtemp()}/smoke.db"
with fencelock.connect(url) as first, fencelock.connect(url) as second:
    with first.lock("smoke", ttl=10, wait=5) as lease:
        held_token = lease.token
        rival = second.try_acquire("smoke", ttl=10)
        if rival is not None:
            sys.exit("a second locker acquired a held lock")
    with second.lock("smoke", ttl=10, wait=5) as lease:
        if not lease.token > held_token:
            sys.exit(f"token did not increase: {held_token} then {lease.token}")
        print(f"python: tokens {held_token} < {lease.token} from {fencelock.__file__}")
