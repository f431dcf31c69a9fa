// The same checks on every backend this machine offers (helpers' backends()): SQLite, and each
// server whose FENCELOCK_TEST_*_URL is set (as `tests/servers.sh env` prints), of those
// FENCELOCK_TEST_BACKENDS lists. A server that does not answer skips its tests, or fails them
// under FENCELOCK_REQUIRE_SERVERS=1.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import {
  fencelock,
  backends,
  connectOrSkip,
  fresh,
  LONG,
  runSql,
  sleep,
  tempDir,
  until,
  within,
} from './helpers.mjs';

const { Fence, AbortError, LockError } = fencelock;
const PROCESSES = 8;
const ROUNDS = 12;
const contender = fileURLToPath(new URL('./_contender.mjs', import.meta.url));

function runContender(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [contender, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 600_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

for (const backend of backends()) {
  describe(backend.id, () => {
    test("pipelinedRelease: the release's reply is read and each lease ends released", async (t) => {
      // On one Redis instance the release goes out on a caller-driven socket from the JS
      // thread; its reply must still be read once the release continues in the background.
      const locker = await connectOrSkip(t, backend.url());
      if (!locker) return;
      try {
        const released = [];
        locker.on('released', (event) => released.push(event));
        const name = fresh('pipelined-reply');
        for (let i = 0; i < 3; i++) {
          const lease = await locker.acquire(name, { pipelinedRelease: true, wait: LONG });
          await lease.release();
        }
        await until(() => released.length === 3, 5_000, 'three released events');
        const next = await locker.tryAcquire(name);
        assert.ok(next, 'the lock is free after the pipelined releases');
        await next.release();
      } finally {
        await locker.close();
      }
    });

    test(`${PROCESSES} processes contend through one lock and a fence; tokens strictly increase`, async (t) => {
      const url = backend.url();
      const probe = await connectOrSkip(t, url);
      if (!probe) return;
      await probe.close();
      const dir = tempDir();
      const dataPath = join(dir, 'data.db');
      const setup = await Fence.open(`sqlite://${dataPath}`, 'setup');
      await setup.fencedExecute(0n, [
        'CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)',
        'INSERT INTO counter VALUES (1, 0)',
        'CREATE TABLE log (seq INTEGER PRIMARY KEY AUTOINCREMENT, token INTEGER, n INTEGER)',
      ]);
      await setup.close();
      writeFileSync(join(dir, 'count'), '0');
      const name = fresh('contention');
      const args = [url, `sqlite://${dataPath}`, dir, name, String(ROUNDS)];
      const results = await Promise.all(
        Array.from({ length: PROCESSES }, () => runContender(args)),
      );
      for (const r of results) {
        assert.equal(r.code, 0, r.err);
        assert.equal(r.out.trim(), 'done 0', 'a process found another inside the lock');
      }
      const total = PROCESSES * ROUNDS;
      assert.deepEqual(runSql(dataPath, 'SELECT n FROM counter WHERE id = 1'), [[total]]);
      const rows = runSql(dataPath, 'SELECT token, n FROM log ORDER BY seq');
      assert.deepEqual(
        rows.map((r) => r[1]),
        Array.from({ length: total }, (_, i) => i + 1),
      );
      const tokens = rows.map((r) => BigInt(r[0]));
      for (let i = 1; i < tokens.length; i++)
        assert.ok(tokens[i] > tokens[i - 1], 'tokens must strictly increase');
    });

    test('100 concurrent acquires in one process: one holder at a time, tokens increasing', async (t) => {
      const locker = await connectOrSkip(t, backend.url());
      if (!locker) return;
      try {
        const name = fresh('hundred');
        let inside = 0;
        const tokens = [];
        await within(
          Promise.all(
            Array.from({ length: 100 }, () =>
              locker.withLock(name, { ttl: 10_000, wait: 120_000 }, async (lease) => {
                assert.equal(inside, 0, 'two holders at once');
                inside += 1;
                tokens.push(lease.token);
                await sleep(0);
                inside -= 1;
              }),
            ),
          ),
          180_000,
          '100 acquisitions',
        );
        assert.equal(tokens.length, 100);
        for (let i = 1; i < tokens.length; i++)
          assert.ok(tokens[i] > tokens[i - 1], 'tokens must strictly increase');
      } finally {
        await locker.close();
      }
    });

    test('an AbortSignal cancels a waiting acquire and leaves nothing behind; timers keep ticking', async (t) => {
      const locker = await connectOrSkip(t, backend.url());
      if (!locker) return;
      try {
        const name = fresh('abort');
        const holder = await locker.acquire(name, { ttl: 10_000 });
        const controller = new AbortController();
        let ticks = 0;
        const ticker = setInterval(() => (ticks += 1), 10);
        const waiting = locker.acquire(name, { ttl: 10_000, signal: controller.signal });
        await sleep(500);
        clearInterval(ticker);
        // The event loop was free while the acquire waited (about 50 ticks; a blocked loop gives 0 or 1).
        assert.ok(ticks >= 5, `only ${ticks} timer ticks in 500 ms while an acquire waited`);
        const reason = new Error('the caller gave up');
        controller.abort(reason);
        await assert.rejects(
          waiting,
          (e) => e instanceof AbortError && e.name === 'AbortError' && e.cause === reason,
        );
        // Already aborted: rejects at once.
        await assert.rejects(locker.acquire(name, { signal: controller.signal }), AbortError);
        // Nothing is left of the waiter (ZooKeeper shows its place in the queue until the
        // background clean-up removes it), and only the holder is on the server ...
        await until(
          async () => (await locker.inspect(name)).waiters.length === 0,
          LONG,
          'the aborted waiter leaving',
        );
        const info = await locker.inspect(name);
        assert.equal(info.held, true);
        assert.equal(info.token, holder.token);
        // ... and once it releases, somebody else gets the lock at once.
        await holder.release();
        const next = await locker.acquire(name, { ttl: 10_000, wait: 5_000 });
        assert.ok(next.token > holder.token);
        await next.release();
      } finally {
        await locker.close();
      }
    });

    test('validUntil is the client deadline: ahead after acquire, by expiresAt, kept after release', async (t) => {
      const locker = await connectOrSkip(t, backend.url());
      if (!locker) return;
      try {
        const before = Date.now();
        const lease = await locker.acquire(fresh('valid-until'), { ttl: 10_000 });
        const until = lease.validUntil;
        assert.ok(until instanceof Date);
        // Within the ttl of the acquire, less what the clock-drift allowance and a slow server take.
        assert.ok(
          until.getTime() > before + 5_000 && until.getTime() <= Date.now() + 10_000,
          `validUntil ${until.toISOString()} is not within 5 to 10 s of the acquire`,
        );
        // The client stops before the server could hand the lock to someone else (TTL backends;
        // ZooKeeper has no expiresAt, its liveness is the session).
        const expires = lease.expiresAt;
        if (expires !== null) assert.ok(until.getTime() <= expires.getTime());
        await lease.release();
        assert.ok(lease.validUntil instanceof Date);
      } finally {
        await locker.close();
      }
    });

    test('lease.signal aborts when the lease is lost (no renewal, short ttl)', async (t) => {
      const locker = await connectOrSkip(t, backend.url());
      if (!locker) return;
      try {
        const name = fresh('lost');
        const lease = await locker.acquire(name, { ttl: 500, autoRenew: false });
        const { signal } = lease;
        assert.equal(signal.aborted, false);
        // ZooKeeper's liveness is its session: the lease ends with the session timeout instead.
        await within(
          new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true })),
          60_000,
          'the lost signal',
        );
        assert.ok(signal.reason instanceof LockError && signal.reason.code === 'LOST');
        assert.equal(lease.isLost, true);
        assert.throws(() => lease.throwIfLost(), { code: 'LOST' });
        await assert.rejects(lease.release(), { code: 'LOST' });
      } finally {
        await locker.close();
      }
    });

    test('withLock rejects with LOST when the lease was lost inside', async (t) => {
      const locker = await connectOrSkip(t, backend.url());
      if (!locker) return;
      try {
        await assert.rejects(
          locker.withLock(fresh('lost-scope'), { ttl: 500, autoRenew: false }, async (lease) => {
            await within(
              new Promise((r) => lease.signal.addEventListener('abort', r, { once: true })),
              60_000,
              'the loss',
            );
          }),
          { code: 'LOST' },
        );
      } finally {
        await locker.close();
      }
    });
  });
}

test("a takeover behind the holder's back aborts lease.signal (SQLite row changed by hand)", async () => {
  const dir = tempDir();
  const dbPath = join(dir, 'locks.db');
  const locker = await fencelock.connect(`sqlite://${dbPath}`);
  try {
    const lease = await locker.acquire('victim', { ttl: 600 });
    const aborted = new Promise((resolve) =>
      lease.signal.addEventListener('abort', resolve, { once: true }),
    );
    const { takeOver } = await import('./helpers.mjs');
    takeOver(dbPath, 'victim');
    await within(aborted, LONG, 'the lost signal');
    assert.equal(lease.signal.reason.code, 'LOST');
    await assert.rejects(lease.extend(), { code: 'LOST' });
  } finally {
    await locker.close();
  }
});
