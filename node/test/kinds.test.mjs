// Semaphores and read-write locks (issue 29): `locker.semaphore(name, { permits, ... })`,
// `readLock`, `writeLock` and their with…() helpers, on every backend this machine offers that
// has them (docs/design.md §1.8; the core's scenarios are core/tests/it/conformance/{semaphore,
// rwlock}.rs), the refusal of semaphores on Redlock, and the API's checks on SQLite. A waiter is
// released only once `inspect` shows it waiting, never after a sleep.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import util from 'node:util';

import {
  fencelock,
  backends,
  connectOrSkip,
  fresh,
  isWrongType,
  LONG,
  sleep,
  tempDir,
  within,
} from './helpers.mjs';

const { AbortError, Fence, LockError } = fencelock;

/** The backends that offer no semaphores, and why (as the core's `backends::not_offered`);
 * every backend offers read-write locks. */
const NO_SEMAPHORES = {
  redlock: 'a permit won on a majority of Redlock masters does not bound the holders to N',
};

// Not a test of expiry: long enough that no renewal starves on a busy machine.
const TTL = 10_000;
const HOLDER = 'nightly report';

/** `count` Lockers on one URL, or [] when the test was skipped (its server does not answer). */
async function lockers(t, url, count) {
  const first = await connectOrSkip(t, url);
  if (!first) return [];
  const all = [first];
  while (all.length < count) all.push(await fencelock.connect(url, { operationTimeout: 10_000 }));
  return all;
}

async function closeAll(all) {
  await Promise.all(all.map((locker) => locker.close()));
}

/** Reads `name` until `settled(info)`: another client's change may reach the server later. */
async function inspectUntil(locker, name, what, settled) {
  const deadline = Date.now() + LONG;
  for (;;) {
    const info = await locker.inspect(name);
    if (settled(info)) return info;
    if (Date.now() > deadline) throw new Error(`never shown ${what}: ${util.inspect(info)}`);
    await sleep(20);
  }
}

const byValue = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
const tokensShown = (info) => info.leases.map((l) => l.token).sort(byValue);
const tokensOf = (leases) => leases.map((l) => l.token).sort(byValue);

/** A promise and whether it has settled yet. */
function track(promise) {
  const tracked = { done: false, promise };
  const settle = () => {
    tracked.done = true;
  };
  promise.then(settle, settle);
  return tracked;
}

/** Every lease `info` shows is in `mode`, held by this process with HOLDER, with time left. */
function assertLeases(info, mode, backendId) {
  assert.equal(info.held, true);
  assert.equal(info.holder, null, 'a mutex field');
  assert.equal(info.timeLeft, null, 'a mutex field');
  for (const lease of info.leases) {
    assert.equal(lease.mode, mode);
    assert.equal(typeof lease.token, 'bigint');
    assert.equal(lease.holder.language, 'node');
    assert.equal(lease.holder.pid, process.pid);
    assert.equal(lease.holder.text, HOLDER);
    if (backendId === 'zookeeper') assert.equal(lease.timeLeft, null, 'the session is the lease');
    else assert.ok(lease.timeLeft > 0 && lease.timeLeft <= TTL, `time left ${lease.timeLeft}`);
  }
}

for (const backend of backends()) {
  const refused = NO_SEMAPHORES[backend.id];
  describe(`${backend.id}: semaphores and read-write locks`, () => {
    if (refused) {
      test(`semaphores are refused with INVALID_ARGUMENT: ${refused}`, async (t) => {
        const [locker] = await lockers(t, backend.url(), 1);
        if (!locker) return;
        try {
          const name = fresh('refused');
          const calls = {
            semaphore: () => locker.semaphore(name, { permits: 2 }),
            withSemaphore: () => locker.withSemaphore(name, { permits: 2 }, () => {}),
          };
          for (const [what, call] of Object.entries(calls)) {
            await assert.rejects(
              call(),
              (e) =>
                e instanceof LockError &&
                e.code === 'INVALID_ARGUMENT' &&
                e.message.includes('does not offer'),
              what,
            );
          }
          // The mutex of the name is untouched. (A wait, not 0: Redlock masters restarted moments
          // ago abstain for a while, and a try would answer UNAVAILABLE.)
          const lease = await locker.acquire(name, { wait: 30 });
          assert.equal(lease.mode, 'exclusive');
          await lease.release();
        } finally {
          await locker.close();
        }
      });
    }

    const semaphores = { skip: refused && `no semaphores on ${backend.id}` };
    test(
      'a semaphore admits N holders; the next times out or waits for a released permit',
      semaphores,
      async (t) => {
        const all = await lockers(t, backend.url(), 2);
        if (all.length === 0) return;
        const [a, b] = all;
        try {
          const name = fresh('sem');
          const options = { permits: 2, ttl: TTL, holder: HOLDER };
          const first = await a.semaphore(name, options);
          const second = await b.semaphore(name, options);
          for (const lease of [first, second]) {
            assert.equal(lease.mode, 'permit');
            assert.equal(lease.name, name);
            assert.equal(lease.isHeld, true);
          }
          assert.ok(second.token > first.token, 'permit tokens follow the grant order');
          await assert.rejects(b.semaphore(name, { ...options, wait: 300 }), { code: 'TIMEOUT' });
          // Every participant uses the same number while the semaphore is in use.
          await assert.rejects(
            b.semaphore(name, { ...options, permits: 3, wait: 0 }),
            (e) => e.code === 'INVALID_ARGUMENT' && e.message.includes(name),
          );
          const waiting = track(a.semaphore(name, { ...options, wait: LONG }));
          const info = await inspectUntil(
            b,
            name,
            'two permits and a waiter',
            (i) => i.waiters.length > 0 && i.leases.length === 2,
          );
          assert.equal(info.kind, 'semaphore');
          assert.equal(info.permits, 2);
          assert.deepEqual(tokensShown(info), tokensOf([first, second]));
          assertLeases(info, 'permit', backend.id);
          assert.equal(waiting.done, false, 'a third permit of 2');
          await first.release();
          const third = await within(waiting.promise, LONG, 'the freed permit');
          assert.equal(third.mode, 'permit');
          assert.ok(third.token > second.token);
          await inspectUntil(b, name, 'the new holder', (i) => {
            const shown = tokensShown(i);
            return shown.length === 2 && shown.includes(third.token) && i.waiters.length === 0;
          });
          await second.release();
          await third.release();
          const free = await inspectUntil(b, name, 'a free semaphore', (i) => !i.held);
          assert.deepEqual(free.leases, []);
        } finally {
          await closeAll(all);
        }
      },
    );

    test(
      'an AbortSignal cancels a waiting semaphore acquire and leaves no waiter',
      semaphores,
      async (t) => {
        const all = await lockers(t, backend.url(), 2);
        if (all.length === 0) return;
        const [a, b] = all;
        try {
          const name = fresh('sem-abort');
          const options = { permits: 1, ttl: TTL };
          const holder = await a.semaphore(name, options);
          const controller = new AbortController();
          const waiting = track(b.semaphore(name, { ...options, signal: controller.signal }));
          await inspectUntil(a, name, 'the waiter', (i) => i.waiters.length === 1);
          const reason = new Error('the caller gave up');
          controller.abort(reason);
          await assert.rejects(
            waiting.promise,
            (e) => e instanceof AbortError && e.cause === reason,
          );
          await inspectUntil(a, name, 'no waiter', (i) => i.waiters.length === 0);
          await holder.release();
          const next = await b.semaphore(name, { ...options, wait: LONG });
          assert.ok(next.token > holder.token);
          await next.release();
        } finally {
          await closeAll(all);
        }
      },
    );

    test('readers share, a writer excludes, and a waiting writer goes before new readers', async (t) => {
      const all = await lockers(t, backend.url(), 3);
      if (all.length === 0) return;
      const [a, b, c] = all;
      try {
        const name = fresh('rw');
        const options = { ttl: TTL, holder: HOLDER };
        const readers = [await a.readLock(name, options), await b.readLock(name, options)];
        for (const lease of readers) assert.equal(lease.mode, 'read');
        let info = await inspectUntil(c, name, 'two readers', (i) => i.leases.length === 2);
        assert.equal(info.kind, 'read-write lock');
        assert.equal(info.permits, null);
        assert.deepEqual(tokensShown(info), tokensOf(readers));
        assertLeases(info, 'read', backend.id);
        await assert.rejects(c.writeLock(name, { ...options, wait: 0 }), { code: 'TIMEOUT' });

        const granted = [];
        const grant = (lease) => {
          granted.push(lease.mode);
          return lease;
        };
        const writer = track(c.writeLock(name, { ...options, wait: LONG }).then(grant));
        await inspectUntil(a, name, 'the waiting writer', (i) => i.waiters.length > 0);
        // Readers do not starve the writer: one arriving now queues behind it.
        await assert.rejects(b.readLock(name, { ...options, wait: 0 }), { code: 'TIMEOUT' });
        const lateReader = track(b.readLock(name, { ...options, wait: LONG }).then(grant));
        for (const lease of readers) await lease.release();

        const write = await within(writer.promise, LONG, 'the writer');
        assert.equal(write.mode, 'write');
        assert.ok(
          readers.every((r) => write.token > r.token),
          'a write token outranks reads',
        );
        info = await inspectUntil(a, name, 'the writer alone', (i) => {
          return i.leases.length === 1 && i.leases[0].token === write.token;
        });
        assertLeases(info, 'write', backend.id);
        await assert.rejects(a.writeLock(name, { wait: 0 }), { code: 'TIMEOUT' });
        assert.equal(lateReader.done, false, 'a reader beside the writer');
        await write.release();
        const late = await within(lateReader.promise, LONG, 'the late reader');
        assert.deepEqual(granted, ['write', 'read']);
        await late.release();
      } finally {
        await closeAll(all);
      }
    });

    test('a permit or read lease cannot guard a fence; a write lease can', async (t) => {
      const [locker] = await lockers(t, backend.url(), 1);
      if (!locker) return;
      const fence = await Fence.open(`sqlite://${join(tempDir(), 'data.db')}`, 'resource');
      try {
        const rw = fresh('fence-rw');
        const read = await locker.readLock(rw, { ttl: TTL });
        const shared = [read];
        if (!refused)
          shared.push(await locker.semaphore(fresh('fence-sem'), { permits: 2, ttl: TTL }));
        for (const lease of shared) {
          const refusal = (e) =>
            e instanceof LockError &&
            e.code === 'INVALID_ARGUMENT' &&
            e.message.includes(`${lease.mode} lease`);
          await assert.rejects(fence.fencedExecute(lease, ['CREATE TABLE t (n INTEGER)']), refusal);
          await assert.rejects(fence.check(lease), refusal);
        }
        assert.equal(await fence.highest(), null);
        for (const lease of shared) await lease.release();
        await locker.withWriteLock(rw, { ttl: TTL }, async (write) => {
          const rows = await fence.fencedExecute(write, [
            'CREATE TABLE t (n INTEGER)',
            ['INSERT INTO t VALUES (?)', [1]],
          ]);
          assert.equal(rows.length, 2);
          assert.equal(rows[1], 1, 'the row inserted');
          assert.equal(await fence.highest(), write.token);
        });
      } finally {
        await fence.close();
        await locker.close();
      }
    });
  });
}

// ---- the API, on SQLite ----

async function sqliteLocker() {
  return fencelock.connect(`sqlite://${join(tempDir(), 'locks.db')}`);
}

test('permits and options are checked: INVALID_ARGUMENT with a message that says why', async () => {
  const locker = await sqliteLocker();
  const name = 'checked';
  const fn = () => {};
  const cases = [
    ['no options', () => locker.semaphore(name), /needs permits/],
    ['no permits', () => locker.semaphore(name, { ttl: TTL }), /needs permits/],
    ['null permits', () => locker.semaphore(name, { permits: null }), /needs permits/],
    ['permits as an argument', () => locker.semaphore(name, 3), /\{ permits: 3 \}/],
    ['0 permits', () => locker.semaphore(name, { permits: 0 }), /1 to 10000/],
    ['10001 permits', () => locker.semaphore(name, { permits: 10_001 }), /1 to 10000/],
    ['-1 permits', () => locker.semaphore(name, { permits: -1 }), /1 to 10000/],
    ['2^32 permits', () => locker.semaphore(name, { permits: 2 ** 32 }), /1 to 10000/],
    ['2.5 permits', () => locker.semaphore(name, { permits: 2.5 }), /whole number/],
    ['NaN permits', () => locker.semaphore(name, { permits: Number.NaN }), /whole number/],
    ['infinite permits', () => locker.semaphore(name, { permits: Infinity }), /whole number/],
    ['permits a string', () => locker.semaphore(name, { permits: '3' }), /the string "3"/],
    ['permits a bigint', () => locker.semaphore(name, { permits: 3n }), /the bigint 3n/],
    ['unknown option', () => locker.semaphore(name, { permits: 2, count: 2 }), /"count"/],
    ['timeout', () => locker.semaphore(name, { permits: 2, timeout: 5 }), /takes no timeout/],
    ['a bad ttl', () => locker.semaphore(name, { permits: 2, ttl: -1 }), /ttl/],
    ['an empty name', () => locker.semaphore('', { permits: 2 }), /name/],
    ['a name not a string', () => locker.readLock(7), /lock name must be a string/],
    ['a lone surrogate', () => locker.writeLock('a\uD800'), /lone surrogate/],
    ['readLock with permits', () => locker.readLock(name, { permits: 2 }), /"permits"/],
    ['writeLock with permits', () => locker.writeLock(name, { permits: 2 }), /"permits"/],
    ['withSemaphore without permits', () => locker.withSemaphore(name, fn), /needs permits/],
    ['withSemaphore without fn', () => locker.withSemaphore(name, { permits: 2 }), /function/],
    ['withReadLock without fn', () => locker.withReadLock(name, {}), /function/],
    [
      'withWriteLock with a bad signal',
      () => locker.withWriteLock(name, { signal: 1 }, fn),
      /signal/,
    ],
  ];
  const wrongTypes = new Set([
    'permits as an argument',
    'permits a string',
    'permits a bigint',
    'a name not a string',
    'withSemaphore without fn',
    'withReadLock without fn',
    'withWriteLock with a bad signal',
  ]);
  try {
    for (const [what, call, message] of cases) {
      await assert.rejects(
        call(),
        (e) =>
          (wrongTypes.has(what)
            ? isWrongType(e)
            : e instanceof LockError && e.code === 'INVALID_ARGUMENT') && message.test(e.message),
        what,
      );
    }
    // Nothing was stored: both bounds work.
    for (const permits of [1, 10_000]) {
      const lease = await locker.semaphore(name, { permits, wait: 0 });
      assert.equal(lease.mode, 'permit');
      assert.equal((await locker.inspect(name)).permits, permits);
      await lease.release();
    }
  } finally {
    await locker.close();
  }
});

test('one name is one kind: a name in use as another kind is INVALID_ARGUMENT naming both', async () => {
  const locker = await sqliteLocker();
  try {
    const mutex = await locker.acquire('one-kind');
    assert.equal(mutex.mode, 'exclusive');
    const info = await locker.inspect('one-kind');
    assert.equal(info.kind, 'mutex');
    assert.equal(info.permits, null);
    assert.deepEqual(info.leases, []);
    const naming = (wanted) => (e) =>
      e.code === 'INVALID_ARGUMENT' && e.message.includes('mutex') && e.message.includes(wanted);
    await assert.rejects(locker.semaphore('one-kind', { permits: 2 }), naming('semaphore'));
    await assert.rejects(locker.readLock('one-kind', { wait: LONG }), naming('read-write lock'));
    await mutex.release();
    const read = await locker.readLock('one-kind');
    await assert.rejects(locker.acquire('one-kind', { wait: LONG }), naming('read-write lock'));
    await read.release();
  } finally {
    await locker.close();
  }
});

test('the with…() helpers hold the lease while fn runs, release after, and re-enter by the rules', async () => {
  const locker = await sqliteLocker();
  const dispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');
  try {
    const result = await locker.withSemaphore('helpers-sem', { permits: 2 }, async (lease) => {
      assert.equal(lease.mode, 'permit');
      assert.deepEqual(tokensShown(await locker.inspect('helpers-sem')), [lease.token]);
      return 'done';
    });
    assert.equal(result, 'done');
    assert.equal((await locker.inspect('helpers-sem')).held, false);

    // The write lease's scope re-enters a read with reentrant (the same token), ...
    await locker.withWriteLock('helpers-rw', { reentrant: true }, async (write) => {
      assert.equal(write.mode, 'write');
      const inner = await locker.withReadLock('helpers-rw', { reentrant: true }, (r) => r.token);
      assert.equal(inner, write.token);
      // ... and without it a nested acquire is DEADLOCK, not a hang.
      await assert.rejects(locker.readLock('helpers-rw'), { code: 'DEADLOCK' });
    });
    // A read lease's scope that asks to write would wait for itself: DEADLOCK at once.
    await locker.withReadLock('helpers-rw', async (read) => {
      assert.equal(read.mode, 'read');
      await assert.rejects(
        locker.writeLock('helpers-rw', { reentrant: true }),
        (e) => e.code === 'DEADLOCK' && e.message.includes('helpers-rw'),
      );
    });
    // fn's error wins, and the lock is released.
    await assert.rejects(
      locker.withReadLock('helpers-rw', () => {
        throw new RangeError('the work failed');
      }),
      RangeError,
    );
    assert.equal((await locker.inspect('helpers-rw')).held, false);

    // Symbol.asyncDispose (`await using`) releases a permit, quietly after a release.
    const permit = await locker.semaphore('helpers-sem', { permits: 1 });
    assert.match(util.inspect(permit), /mode: permit, held/);
    await permit[dispose]();
    assert.equal(permit.isHeld, false);
    await permit[dispose]();
    const again = await locker.semaphore('helpers-sem', { permits: 1, wait: 0 });
    assert.ok(again.token > permit.token);
    await again.release();
  } finally {
    await locker.close();
  }
});
