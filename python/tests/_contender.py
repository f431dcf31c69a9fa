"""One contending process: fenced critical sections on one lock and one fence.

Inside each critical section it checks, with a marker file made with O_EXCL, that nobody else
is inside; does a read-modify-write of a counter in a plain file (an overlap would lose an
update); and writes through the fence: the counter row and a log row with its token.
"""

import os
import sys

import fencelock

lock_url, data_url, folder, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
marker = os.path.join(folder, "inside")
count_file = os.path.join(folder, "count")
overlaps = 0

with fencelock.connect(lock_url) as locker, fencelock.Fence.open(data_url, "counter") as fence:
    for _ in range(rounds):
        with locker.lock("counter", ttl=10, wait=300) as lease:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                os.close(fd)
                mine = True
            except FileExistsError:
                overlaps += 1
                mine = False
            with open(count_file) as f:
                n = int(f.read())
            fence.fenced_execute(
                lease,
                [
                    ("UPDATE counter SET n = n + 1 WHERE id = 1", []),
                    (
                        "INSERT INTO log (token, n) SELECT ?, n FROM counter WHERE id = 1",
                        [lease.token],
                    ),
                ],
            )
            with open(count_file + ".tmp", "w") as f:
                f.write(str(n + 1))
            os.replace(count_file + ".tmp", count_file)
            if mine:
                os.unlink(marker)
print(f"done {overlaps}", flush=True)
