"""Blocks entering a write lock the test holds, until SIGINT arrives."""

import sys
import time

import fencelock

url = sys.argv[1]
with fencelock.connect(url) as locker:
    started = time.monotonic()
    try:
        # Ready is said inside the try, so even a very early SIGINT is caught here.
        print("ready", flush=True)
        with locker.write_lock("ctrl-c", ttl=10):
            print("acquired?!", flush=True)
            sys.exit(3)
    except KeyboardInterrupt:
        print(f"interrupted after {time.monotonic() - started:.2f}s", flush=True)
    # Nothing of ours was left behind: the test's lease is still the holder.
    info = locker.inspect("ctrl-c")
    print("held" if info.held else "free", flush=True)
