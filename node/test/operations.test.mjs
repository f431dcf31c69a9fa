// Inspection, administration, lifecycle events and the logger (issue 13), on every backend
// this machine offers.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';

import {
  fencelock,
  backends,
  connectOrSkip,
  fresh,
  LONG,
  sleep,
  tempDir,
  within,
} from './helpers.mjs';

const { LockError, setLogger } = fencelock;

async function until(predicate, what) {
  const started = Date.now();
  while (!predicate()) {
    if (Date.now() - started > LONG) throw new Error(`${what} did not happen within ${LONG} ms`);
    await sleep(20);
  }
}

for (const backend of backends()) {
  describe(backend.id, () => {
    test('inspect, list and a forced release that the holder hears of', async (t) => {
      const locker = await connectOrSkip(t, backend.url());
      if (!locker) return;
      try {
        const name = `${fresh('ops')}/job*`;
        const lease = await locker.acquire(name, { ttl: 6_000, holder: 'nightly report' });
        const info = await locker.inspect(name);
        assert.equal(info.held, true);
        assert.equal(info.token, lease.token);
        assert.equal(info.holder.language, 'node');
        assert.equal(info.holder.pid, process.pid);
        assert.equal(info.holder.text, 'nightly report');
        assert.deepEqual(info.waiters, []);
        const listed = await locker.list(name.slice(0, -1));
        assert.equal(listed.truncated, false);
        assert.deepEqual(
          listed.locks.map((l) => l.name),
          [name],
        );
        assert.equal(listed.locks[0].token, lease.token);
        // The prefix is data: a wildcard matches only a name that spells it.
        assert.equal((await locker.list(`${name.slice(0, -4)}*`)).locks.length, 0);

        const lost = new Promise((resolve) =>
          lease.signal.addEventListener('abort', resolve, { once: true }),
        );
        await locker.forceRelease(name);
        // Within one renewal interval (ttl/3; ZooKeeper at once) plus a generous margin.
        await within(lost, 2_000 + 10_000, 'the lost signal');
        assert.equal(lease.isLost, true);
        await assert.rejects(lease.release(), (e) => e instanceof LockError && e.code === 'LOST');
        assert.equal((await locker.inspect(name)).held, false);
        await assert.rejects(locker.forceRelease(name), (e) => e.code === 'NOT_HELD');
      } finally {
        await locker.close();
      }
    });

    test('bad inputs get typed errors', async (t) => {
      const locker = await connectOrSkip(t, backend.url());
      if (!locker) return;
      try {
        await assert.rejects(locker.list('a\0b'), (e) => e.code === 'INVALID_ARGUMENT');
        await assert.rejects(locker.list('x'.repeat(256)), (e) => e.code === 'INVALID_ARGUMENT');
        await assert.rejects(locker.list(7), (e) => e.code === 'ERR_INVALID_ARG_TYPE');
        await assert.rejects(locker.forceRelease(''), (e) => e.code === 'INVALID_ARGUMENT');
        await assert.rejects(
          locker.forceRelease(fresh('never-held')),
          (e) => e.code === 'NOT_HELD',
        );
      } finally {
        await locker.close();
      }
    });

    test('lifecycle events arrive in order, including a loss', async (t) => {
      const locker = await connectOrSkip(t, backend.url());
      if (!locker) return;
      try {
        const name = fresh('events');
        const seen = [];
        const lostEvents = [];
        locker.on('event', (e) => e.name === name && seen.push(e));
        locker.on('lost', (e) => e.name === name && lostEvents.push(e));
        const first = await locker.acquire(name, { ttl: 900 });
        await until(() => seen.some((e) => e.kind === 'renewed'), 'a renewal');
        await first.release();
        await until(() => seen.some((e) => e.kind === 'released'), 'the release event');
        const second = await locker.acquire(name, { ttl: 3_000 });
        await locker.forceRelease(name);
        await until(() => lostEvents.length === 1, 'the lost event');
        const kinds = seen.map((e) => e.kind);
        const firstLife = kinds.slice(0, kinds.indexOf('released') + 1);
        const secondLife = kinds.slice(firstLife.length);
        assert.equal(firstLife[0], 'acquired');
        assert.ok(
          firstLife.slice(1, -1).every((k) => k === 'renewed'),
          kinds.join(),
        );
        assert.equal(secondLife[0], 'acquired');
        assert.equal(secondLife.at(-1), 'lost');
        assert.ok(
          secondLife.slice(1, -1).every((k) => k === 'renewed'),
          kinds.join(),
        );
        assert.ok(seen.slice(0, firstLife.length).every((e) => e.token === first.token));
        assert.ok(seen.slice(firstLife.length).every((e) => e.token === second.token));
        assert.match(lostEvents[0].reason, /no longer ours/);
        assert.ok(lostEvents[0].timestamp instanceof Date);
      } finally {
        locker.removeAllListeners();
        await locker.close();
      }
    });
  });
}

test('the logger receives the library records', async () => {
  const records = [];
  const url = `sqlite://${join(tempDir(), 'locks.db')}`;
  const locker = await fencelock.connect(url, { logger: (r) => records.push(r), logLevel: 'warn' });
  try {
    const name = fresh('logs');
    const lease = await locker.acquire(name, { ttl: 3_000 });
    await locker.forceRelease(name);
    await within(
      new Promise((r) => lease.signal.addEventListener('abort', r, { once: true })),
      LONG,
      'the loss',
    );
    await until(
      () => records.some((r) => r.lock === name && /lost/.test(r.message)),
      'the loss record',
    );
    const record = records.find((r) => r.lock === name && /lost/.test(r.message));
    assert.equal(record.level, 'warn');
    assert.ok(record.message.includes(name));
    assert.ok(records.some((r) => /force-released/.test(r.message)));
    assert.ok(records.every((r) => r.level === 'warn' || r.level === 'error'));
  } finally {
    setLogger(null);
    await locker.close();
  }
  assert.throws(
    () => setLogger(() => {}, { level: 'loud' }),
    (e) => e.code === 'INVALID_ARGUMENT',
  );
  await assert.rejects(
    fencelock.connect(url, { logLevel: 'warn' }),
    (e) => e.code === 'INVALID_ARGUMENT',
  );
});
