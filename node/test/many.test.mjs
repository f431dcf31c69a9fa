// Several names as one lock (docs/design.md §1.9; the core's scenarios are
// core/tests/it/conformance/many.rs): `locker.lockMany(names, opts)` and `withLocks`, on every
// backend this machine offers (every backend has them: the parts are plain mutexes), and the
// API's checks, re-entry and disposal on SQLite. What another client sees is read with
// `inspect` until it shows, never after a sleep.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
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
  takeOver,
  tempDir,
  within,
} from './helpers.mjs';

const { AbortError, Fence, Lease, LockError, MultiLease } = fencelock;
const dispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');

// Not a test of expiry: long enough that no renewal starves on a busy machine.
const TTL = 10_000;
// A wait that ends, for TIMEOUT: not 0, since Redlock masters restarted moments ago abstain for
// a while, and a try would answer UNAVAILABLE.
const SHORT_WAIT = 300;

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

const free = (locker, name) => inspectUntil(locker, name, `${name} free`, (i) => !i.held);

/** Names of one test in a known order: `${base}-1` < `${base}-2` < ... */
function ordered(prefix, count) {
  const base = fresh(prefix);
  return Array.from({ length: count }, (_, i) => `${base}-${i + 1}`);
}

/** Resolves when `signal` aborts (at once if it has). */
function aborted(signal, what) {
  if (signal.aborted) return Promise.resolve();
  return within(
    new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true })),
    60_000,
    what,
  );
}

/** A promise and whether it has settled yet. */
function track(promise) {
  const tracked = { done: false, promise };
  const settle = () => {
    tracked.done = true;
  };
  promise.then(settle, settle);
  return tracked;
}

for (const backend of backends()) {
  describe(`${backend.id}: several names as one lock`, () => {
    test('lockMany holds every name, in canonical order, and one release frees them all', async (t) => {
      const all = await lockers(t, backend.url(), 2);
      if (all.length === 0) return;
      const [a, b] = all;
      try {
        const [n1, n2, n3] = ordered('many', 3);
        const locks = await a.lockMany([n3, n1, n2], { ttl: TTL, holder: 'transfer' });
        assert.ok(locks instanceof MultiLease);
        assert.deepEqual(locks.names, [n1, n2, n3], 'the canonical order, whatever was given');
        assert.ok(locks.tokens instanceof Map);
        assert.deepEqual([...locks.tokens.keys()], [n1, n2, n3]);
        assert.equal(locks.isHeld, true);
        assert.equal(locks.isLost, false);
        assert.equal(locks.signal.aborted, false);
        locks.throwIfLost();
        for (const name of [n1, n2, n3]) {
          const part = locks.part(name);
          assert.ok(part instanceof Lease);
          assert.equal(part.name, name);
          assert.equal(part.mode, 'exclusive');
          assert.equal(typeof part.token, 'bigint');
          assert.equal(locks.tokens.get(name), part.token);
          // Another client sees each name held under that part's token.
          const info = await inspectUntil(b, name, 'the part held', (i) => i.held);
          assert.equal(info.token, part.token);
          if (info.holder !== null) assert.equal(info.holder.text, 'transfer');
        }
        assert.equal(locks.part(fresh('other')), undefined);
        // Nobody else gets any of them, whether alone or as a set in another order.
        await assert.rejects(b.acquire(n2, { wait: SHORT_WAIT }), { code: 'TIMEOUT' });
        await assert.rejects(b.lockMany([n2, n1], { wait: SHORT_WAIT }), { code: 'TIMEOUT' });

        // The whole is valid until its earliest part's deadline.
        await locks.extend(TTL);
        const until = locks.validUntil;
        const expires = locks.expiresAt;
        assert.ok(until instanceof Date);
        const parts = locks.names.map((name) => locks.part(name));
        assert.ok(until.getTime() <= Math.min(...parts.map((p) => p.validUntil.getTime())));
        if (backend.id === 'zookeeper') assert.equal(expires, null, 'the session is the lease');
        else {
          assert.ok(expires instanceof Date);
          assert.ok(until.getTime() <= expires.getTime());
          assert.ok(expires.getTime() <= Math.min(...parts.map((p) => p.expiresAt.getTime())));
        }

        await locks.release();
        assert.equal(locks.isHeld, false);
        assert.equal(locks.isLost, false);
        for (const part of parts) assert.equal(part.isHeld, false);
        for (const name of [n1, n2, n3]) await free(b, name);
        const again = await b.lockMany([n1, n2, n3], { ttl: TTL, wait: LONG });
        for (const name of [n1, n2, n3])
          assert.ok(again.tokens.get(name) > locks.tokens.get(name), 'a new token per name');
        await again.release();
        await assert.rejects(locks.release(), { code: 'NOT_HELD' });
      } finally {
        await closeAll(all);
      }
    });

    test('all or nothing: a busy name is TIMEOUT naming it, and the names taken are let go', async (t) => {
      const all = await lockers(t, backend.url(), 2);
      if (all.length === 0) return;
      const [a, b] = all;
      try {
        // n1 is taken first, then n2 stays busy: n1 is released, n3 never taken.
        const [n1, n2, n3] = ordered('all-or-nothing', 3);
        const busy = await b.acquire(n2, { ttl: TTL });
        await assert.rejects(
          a.lockMany([n3, n2, n1], { ttl: TTL, wait: SHORT_WAIT }),
          (e) => e instanceof LockError && e.code === 'TIMEOUT' && e.message.includes(n2),
        );
        await free(b, n1);
        await free(b, n3);
        const other = await b.lockMany([n1, n3], { ttl: TTL, wait: LONG });
        await other.release();
        // Once the busy name is free, the whole set comes.
        const waiting = track(a.lockMany([n1, n2, n3], { ttl: TTL, wait: LONG }));
        await inspectUntil(b, n1, 'the first part taken', (i) => i.held);
        assert.equal(waiting.done, false, 'the set without its busy name');
        await busy.release();
        const locks = await within(waiting.promise, LONG, 'the set');
        assert.ok(locks.tokens.get(n2) > busy.token);
        await locks.release();
      } finally {
        await closeAll(all);
      }
    });

    test('callers naming overlapping sets in opposite orders do not deadlock', async (t) => {
      const all = await lockers(t, backend.url(), 3);
      if (all.length === 0) return;
      const [x, y, z] = ordered('opposite', 3);
      const orders = [
        [x, y, z],
        [z, y, x],
        [y, x],
      ];
      const ROUNDS = 5;
      const inside = new Map([x, y, z].map((name) => [name, 0]));
      const taken = [];
      try {
        await within(
          Promise.all(
            all.map(async (locker, i) => {
              for (let round = 0; round < ROUNDS; round++) {
                await locker.withLocks(orders[i], { ttl: TTL, wait: LONG }, async (locks) => {
                  for (const name of locks.names) {
                    assert.equal(inside.get(name), 0, `two holders of ${name}`);
                    inside.set(name, 1);
                  }
                  taken.push(locks.tokens);
                  await new Promise((resolve) => setImmediate(resolve));
                  for (const name of locks.names) inside.set(name, 0);
                });
              }
            }),
          ),
          LONG * 4,
          'every round of three callers',
        );
        assert.equal(taken.length, ROUNDS * orders.length);
        // Each name's tokens increase in the order its holders had it.
        for (const name of [x, y, z]) {
          const tokens = taken.filter((m) => m.has(name)).map((m) => m.get(name));
          for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i] > tokens[i - 1], name);
        }
      } finally {
        await closeAll(all);
      }
    });

    test('a part force-released elsewhere: the whole is lost, its signal aborts, release says LOST', async (t) => {
      const all = await lockers(t, backend.url(), 2);
      if (all.length === 0) return;
      const [a, b] = all;
      try {
        const [n1, n2] = ordered('lost', 2);
        // A short ttl renews often, so the holder learns of the forced release soon (ZooKeeper
        // at once).
        const locks = await a.lockMany([n1, n2], { ttl: 3_000 });
        const { signal } = locks;
        assert.equal(signal.aborted, false);
        await b.forceRelease(n2);
        await aborted(signal, 'the lost signal');
        assert.ok(signal.reason instanceof LockError);
        assert.equal(signal.reason.code, 'LOST');
        assert.ok(signal.reason.message.includes(n2), signal.reason.message);
        assert.equal(locks.isLost, true);
        assert.equal(locks.isHeld, false);
        assert.equal(locks.part(n2).isLost, true);
        assert.throws(() => locks.throwIfLost(), { code: 'LOST' });
        await assert.rejects(locks.extend(), { code: 'LOST' });
        await assert.rejects(locks.release(), { code: 'LOST' });
        // The release let the other part go.
        await free(b, n1);
        await assert.rejects(locks[dispose](), { code: 'LOST' }, 'disposal after a loss');
      } finally {
        await closeAll(all);
      }
    });

    test('an AbortSignal cancels a waiting lockMany and leaves nothing behind', async (t) => {
      const all = await lockers(t, backend.url(), 2);
      if (all.length === 0) return;
      const [a, b] = all;
      try {
        const [n1, n2] = ordered('abort', 2);
        const busy = await b.acquire(n2, { ttl: TTL });
        const controller = new AbortController();
        const waiting = track(a.lockMany([n2, n1], { ttl: TTL, signal: controller.signal }));
        // n1 is taken first; the call then waits for n2.
        await inspectUntil(b, n1, 'the first part taken', (i) => i.held);
        const reason = new Error('the caller gave up');
        controller.abort(reason);
        await assert.rejects(waiting.promise, (e) => e instanceof AbortError && e.cause === reason);
        await free(b, n1);
        assert.equal((await b.inspect(n2)).token, busy.token);
        // Already aborted: rejects at once.
        await assert.rejects(a.lockMany([n1], { signal: controller.signal }), AbortError);
        await busy.release();
        const locks = await a.lockMany([n1, n2], { ttl: TTL, wait: LONG });
        assert.ok(locks.tokens.get(n2) > busy.token);
        await locks.release();
      } finally {
        await closeAll(all);
      }
    });

    test('a part guards a Fence as a single lease does', async (t) => {
      const [locker] = await lockers(t, backend.url(), 1);
      if (!locker) return;
      const dir = tempDir();
      const accounts = await Fence.open(`sqlite://${join(dir, 'data.db')}`, 'accounts');
      const audit = await Fence.open(`sqlite://${join(dir, 'data.db')}`, 'audit');
      try {
        const [account, log] = ordered('fence', 2);
        const result = await locker.withLocks([log, account], { ttl: TTL }, async (locks) => {
          const rows = await accounts.fencedExecute(locks.part(account), [
            'CREATE TABLE balance (n INTEGER)',
            ['INSERT INTO balance VALUES (?)', [100]],
          ]);
          assert.deepEqual(rows.slice(1), [1], 'the row inserted');
          await audit.fencedExecute(locks.part(log), [
            'CREATE TABLE entries (token INTEGER)',
            ['INSERT INTO entries VALUES (?)', [locks.tokens.get(account)]],
          ]);
          assert.equal(await accounts.highest(), locks.part(account).token);
          assert.equal(await audit.highest(), locks.part(log).token);
          // An older token of the same name is refused.
          const older = locks.part(account).token - 1n;
          if (older >= 0n) await assert.rejects(accounts.check(older), { code: 'STALE_TOKEN' });
          return locks.tokens;
        });
        assert.equal(result.size, 2);
      } finally {
        await accounts.close();
        await audit.close();
        await locker.close();
      }
    });
  });
}

// ---- the API, on SQLite ----

async function sqliteLocker() {
  const path = join(tempDir(), 'locks.db');
  return { locker: await fencelock.connect(`sqlite://${path}`), path };
}

test('bad names and options are INVALID_ARGUMENT (a TypeError for a wrong type) with a message that says why; nothing is taken', async () => {
  const { locker } = await sqliteLocker();
  const fn = () => {};
  const many = Array.from({ length: 65 }, (_, i) => `n${i}`);
  const cases = [
    ['no names', () => locker.lockMany([]), /at least one name/],
    ['a name twice', () => locker.lockMany(['a', 'b', 'a']), /"a" is given twice/],
    ['65 names', () => locker.lockMany(many), /at most 64/],
    ['an empty name', () => locker.lockMany(['a', '']), /name/],
    ['a name not a string', () => locker.lockMany(['a', 7]), /lock name 2 must be a string/],
    ['a null name', () => locker.lockMany([null]), /lock name 1 must be a string, not null/],
    ['a lone surrogate', () => locker.lockMany(['a\uD800']), /lone surrogate/],
    ['one name, not an array', () => locker.lockMany('a'), /an array of strings.*\["a"\]/],
    ['no names at all', () => locker.lockMany(), /an array of strings/],
    ['a Set', () => locker.lockMany(new Set(['a'])), /an array of strings, not an object \(Set\)/],
    ['unknown option', () => locker.lockMany(['a'], { count: 2 }), /"count"/],
    ['timeout', () => locker.lockMany(['a'], { timeout: 5 }), /takes no timeout/],
    ['a bad ttl', () => locker.lockMany(['a'], { ttl: -1 }), /ttl/],
    ['a bad wait', () => locker.lockMany(['a'], { wait: '1s' }), /wait/],
    ['a bad signal', () => locker.lockMany(['a'], { signal: 1 }), /signal/],
    ['options not an object', () => locker.lockMany(['a'], 5), /options must be an object/],
    ['withLocks without fn', () => locker.withLocks(['a'], {}), /needs a function/],
    ['withLocks with one name', () => locker.withLocks('a', fn), /an array of strings/],
    ['withLocks with no names', () => locker.withLocks([], fn), /at least one name/],
    ['withLocks with a bad option', () => locker.withLocks(['a'], { ttl: 'x' }, fn), /ttl/],
  ];
  const wrongTypes = new Set([
    'a name not a string',
    'a null name',
    'one name, not an array',
    'no names at all',
    'a Set',
    'a bad wait',
    'a bad signal',
    'options not an object',
    'withLocks without fn',
    'withLocks with one name',
    'withLocks with a bad option',
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
    assert.deepEqual((await locker.list('')).locks, [], 'nothing was taken');
    // The bound itself is fine.
    const most = await locker.lockMany(many.slice(0, 64), { wait: 0 });
    assert.equal(most.names.length, 64);
    assert.throws(() => most.part(7), { code: 'ERR_INVALID_ARG_TYPE' });
    await assert.rejects(most.extend('long'), { code: 'ERR_INVALID_ARG_TYPE' });
    await most.release();
    assert.deepEqual((await locker.list('')).locks, []);
  } finally {
    await locker.close();
  }
  await assert.rejects(locker.lockMany(['after-close']), { code: 'CLOSED' });
});

test('withLocks holds the names while fn runs, releases after, and lets errors and losses through', async () => {
  const { locker, path } = await sqliteLocker();
  try {
    const result = await locker.withLocks(['w-b', 'w-a'], async (locks) => {
      assert.deepEqual(locks.names, ['w-a', 'w-b']);
      assert.equal((await locker.inspect('w-b')).token, locks.tokens.get('w-b'));
      return 'done';
    });
    assert.equal(result, 'done');
    for (const name of ['w-a', 'w-b']) assert.equal((await locker.inspect(name)).held, false);

    // fn's error wins, and the names are released.
    await assert.rejects(
      locker.withLocks(['w-a', 'w-b'], { ttl: TTL }, () => {
        throw new RangeError('the work failed');
      }),
      RangeError,
    );
    for (const name of ['w-a', 'w-b']) assert.equal((await locker.inspect(name)).held, false);

    // Releasing inside fn is allowed: the exit is quiet.
    await locker.withLocks(['w-a', 'w-b'], async (locks) => {
      await locks.release();
    });

    // A part taken over behind the holder's back: withLocks rejects with LOST.
    await assert.rejects(
      locker.withLocks(['w-a', 'w-b'], { ttl: 600 }, async (locks) => {
        takeOver(path, 'w-b');
        await aborted(locks.signal, 'the loss');
        assert.match(locks.signal.reason.message, /"w-b"/);
      }),
      { code: 'LOST' },
    );
    assert.equal((await locker.inspect('w-a')).held, false, 'the held part was released');
  } finally {
    await locker.close();
  }
});

test('re-entry follows the core rules per name: DEADLOCK without reentrant, the same token with it', async () => {
  const { locker } = await sqliteLocker();
  try {
    await locker.withLocks(['r-a', 'r-b'], async (locks) => {
      await assert.rejects(
        locker.acquire('r-a'),
        (e) => e.code === 'DEADLOCK' && e.message.includes('r-a'),
      );
      const inner = await locker.acquire('r-b', { reentrant: true });
      assert.equal(inner.token, locks.tokens.get('r-b'));
      await inner.release();
      assert.equal(locks.isHeld, true, 'the nested release kept the lock');
    });
    assert.equal((await locker.inspect('r-b')).held, false);

    await locker.withLock('r-b', { reentrant: true }, async (outer) => {
      // r-a is taken first, then r-b is DEADLOCK: r-a is let go.
      await assert.rejects(
        locker.lockMany(['r-b', 'r-a']),
        (e) => e.code === 'DEADLOCK' && e.message.includes('r-b'),
      );
      assert.equal((await locker.inspect('r-a')).held, false);
      const nested = await locker.lockMany(['r-a', 'r-b'], { reentrant: true });
      assert.equal(nested.part('r-b').token, outer.token);
      await nested.release();
      assert.equal((await locker.inspect('r-b')).token, outer.token, 'still held by the outer');
      assert.equal((await locker.inspect('r-a')).held, false);
    });
  } finally {
    await locker.close();
  }
});

test('a MultiLease: a copy of its names and tokens, parts, inspect, and a quiet disposal after release', async () => {
  const { locker } = await sqliteLocker();
  try {
    assert.throws(() => new MultiLease(), TypeError);
    const locks = await locker.lockMany(['c', 'a', 'b'], { wait: 0 });
    const names = locks.names;
    names.push('z');
    assert.deepEqual(locks.names, ['a', 'b', 'c']);
    locks.tokens.delete('a');
    assert.equal(locks.tokens.size, 3);
    for (const token of locks.tokens.values()) assert.equal(typeof token, 'bigint');
    assert.equal(locks.part('a'), locks.part('a'), 'one Lease per part');
    assert.match(util.inspect(locks), /^MultiLease \{ "a": \d+n, "b": \d+n, "c": \d+n, held \}$/);

    // A part released on its own: the whole is no longer held; releasing it says so, and
    // releases the rest.
    await locks.part('b').release();
    assert.equal(locks.isHeld, false);
    assert.equal(locks.isLost, false);
    assert.throws(() => locks.throwIfLost(), { code: 'NOT_HELD' });
    await assert.rejects(locks.release(), { code: 'NOT_HELD' });
    assert.equal((await locker.inspect('a')).held, false);
    assert.match(util.inspect(locks), /released \}$/);

    // Symbol.asyncDispose (`await using`) releases, quietly after a release.
    const again = await locker.lockMany(['a', 'b'], { wait: 0 });
    await again[dispose]();
    assert.equal(again.isHeld, false);
    await again[dispose]();
    const third = await locker.lockMany(['a', 'b'], { wait: 0 });
    assert.ok(third.tokens.get('a') > again.tokens.get('a'));
    await third.release();
  } finally {
    await locker.close();
  }
});

test('the CommonJS and ESM entry points export the same MultiLease', () => {
  const require = createRequire(import.meta.url);
  assert.equal(require('../index.js').MultiLease, MultiLease);
  assert.equal(typeof MultiLease, 'function');
});
