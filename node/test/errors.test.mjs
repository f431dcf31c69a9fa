// Bad inputs and misuse: each rejects (or throws) a LockError with its documented code and a
// message, and never crashes the process. An argument of the wrong type is Node's own argument
// error instead (TYPE below): a TypeError with code ERR_INVALID_ARG_TYPE.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';

import { fencelock, LONG, server, tempDir, sleep } from './helpers.mjs';
import * as hooks from './hooks.mjs';

const { connect, Fence, LockError } = fencelock;

let url;
let locker;
let closedLocker;
let held;
let released;
let lost;
let fence;

before(async () => {
  const dir = tempDir();
  url = `sqlite://${join(dir, 'locks.db')}`;
  locker = await connect(url);
  closedLocker = await connect(url);
  await closedLocker.close();
  held = await locker.acquire('held', { ttl: 10_000 });
  released = await locker.acquire('released');
  await released.release();
  lost = await locker.acquire('lost', { ttl: 200, autoRenew: false });
  const until = Date.now() + LONG;
  while (!lost.isLost && Date.now() < until) await sleep(20);
  assert.equal(lost.isLost, true);
  fence = await Fence.open(`sqlite://${join(dir, 'data.db')}`, 'resource');
});

after(async () => {
  await fence?.close();
  await locker?.close();
});

const cases = [
  // connect
  ['connect: url not a string', 'TYPE', () => connect(123)],
  ['connect: empty url', 'INVALID_ARGUMENT', () => connect('')],
  ['connect: unknown scheme', 'INVALID_ARGUMENT', () => connect('ftp://127.0.0.1/locks')],
  ['connect: not a url', 'INVALID_ARGUMENT', () => connect('not a url')],
  ['connect: options not an object', 'TYPE', () => connect(url, 'fast')],
  ['connect: unknown option', 'INVALID_ARGUMENT', () => connect(url, { poll: 5 })],
  ['connect: pollInterval 0', 'INVALID_ARGUMENT', () => connect(url, { pollInterval: 0 })],
  [
    'connect: operationTimeout NaN',
    'INVALID_ARGUMENT',
    () => connect(url, { operationTimeout: NaN }),
  ],
  ['connect: operationTimeout a string', 'TYPE', () => connect(url, { operationTimeout: '10s' })],
  [
    'connect: nobody listening',
    'UNAVAILABLE',
    () => connect('redis://127.0.0.1:1', { operationTimeout: 3_000 }),
  ],
  // names
  ['acquire: name not a string', 'TYPE', () => locker.acquire(42)],
  ['acquire: name missing', 'TYPE', () => locker.acquire()],
  ['acquire: empty name', 'INVALID_ARGUMENT', () => locker.acquire('')],
  ['acquire: name with NUL', 'INVALID_ARGUMENT', () => locker.acquire('a\0b')],
  ['acquire: name over 255 bytes', 'INVALID_ARGUMENT', () => locker.acquire('é'.repeat(128))],
  ['inspect: name null', 'TYPE', () => locker.inspect(null)],
  // durations
  ['ttl NaN', 'INVALID_ARGUMENT', () => locker.acquire('x', { ttl: NaN })],
  ['ttl Infinity', 'INVALID_ARGUMENT', () => locker.acquire('x', { ttl: Infinity })],
  ['ttl negative', 'INVALID_ARGUMENT', () => locker.acquire('x', { ttl: -1 })],
  ['ttl a string', 'TYPE', () => locker.acquire('x', { ttl: '1000' })],
  ['ttl a bigint', 'TYPE', () => locker.acquire('x', { ttl: 1000n })],
  ['ttl above 2^53', 'INVALID_ARGUMENT', () => locker.acquire('x', { ttl: 2 ** 53 + 2 })],
  ['ttl below the minimum', 'INVALID_ARGUMENT', () => locker.acquire('x', { ttl: 50 })],
  [
    'ttl above the maximum',
    'INVALID_ARGUMENT',
    () => locker.acquire('x', { ttl: 8 * 24 * 3600 * 1000 }),
  ],
  ['ttl null', 'TYPE', () => locker.acquire('x', { ttl: null })],
  ['wait negative', 'INVALID_ARGUMENT', () => locker.acquire('x', { wait: -5 })],
  ['wait Infinity', 'INVALID_ARGUMENT', () => locker.acquire('x', { wait: Infinity })],
  ['wait NaN', 'INVALID_ARGUMENT', () => locker.acquire('x', { wait: NaN })],
  ['wait a string', 'TYPE', () => locker.acquire('x', { wait: '10' })],
  ['maxHold zero', 'INVALID_ARGUMENT', () => locker.acquire('x', { maxHold: 0 })],
  // other options
  ['autoRenew not a boolean', 'TYPE', () => locker.acquire('x', { autoRenew: 'yes' })],
  ['holder not a string', 'TYPE', () => locker.acquire('x', { holder: 7 })],
  ['holder too long', 'INVALID_ARGUMENT', () => locker.acquire('x', { holder: 'h'.repeat(2000) })],
  ['signal not an AbortSignal', 'TYPE', () => locker.acquire('x', { signal: {} })],
  ['unknown option', 'INVALID_ARGUMENT', () => locker.acquire('x', { ttll: 5000 })],
  ['timeout option', 'INVALID_ARGUMENT', () => locker.acquire('x', { timeout: 1000 })],
  ['reentrant not a boolean', 'TYPE', () => locker.acquire('x', { reentrant: 'yes' })],
  ['tryAcquire reentrant not a boolean', 'TYPE', () => locker.tryAcquire('x', { reentrant: 1 })],
  [
    'withLock reentrant not a boolean',
    'TYPE',
    () => locker.withLock('x', { reentrant: null }, () => {}),
  ],
  // lone surrogates: Node-API would make both of these "a\uFFFD", one lock
  ['a name with a lone high surrogate', 'INVALID_ARGUMENT', () => locker.acquire('a\uD800')],
  ['a name with a lone low surrogate', 'INVALID_ARGUMENT', () => locker.tryAcquire('a\uDC00')],
  ['a prefix with a lone surrogate', 'INVALID_ARGUMENT', () => locker.list('\uD800')],
  // elections
  ['campaign with a non-string name', 'TYPE', () => locker.campaign(7)],
  ['campaign with an empty name', 'INVALID_ARGUMENT', () => locker.campaign('')],
  ['campaign with reentrant', 'INVALID_ARGUMENT', () => locker.campaign('x', { reentrant: true })],
  ['campaign with maxHold zero', 'INVALID_ARGUMENT', () => locker.campaign('x', { maxHold: 0 })],
  ['campaign ttl a string', 'TYPE', () => locker.campaign('x', { ttl: '1s' })],
  ['campaign signal not an AbortSignal', 'TYPE', () => locker.campaign('x', { signal: 5 })],
  ['campaign options not an object', 'TYPE', () => locker.campaign('x', 'ttl')],
  ['leader with a non-string name', 'TYPE', () => locker.leader(null)],
  ['withLeadership without a function', 'TYPE', () => locker.withLeadership('x', {})],
  ['campaign on a closed locker', 'CLOSED', () => closedLocker.campaign('x')],
  ['options not an object', 'TYPE', () => locker.acquire('x', 'ttl=5')],
  ['tryAcquire with a wait', 'INVALID_ARGUMENT', () => locker.tryAcquire('x', { wait: 5 })],
  ['withLock without a function', 'TYPE', () => locker.withLock('x')],
  ['withLock with a non-function', 'TYPE', () => locker.withLock('x', {}, 'work')],
  ['extend ttl NaN', 'INVALID_ARGUMENT', () => held.extend(NaN)],
  ['extend ttl too short', 'INVALID_ARGUMENT', () => held.extend(50)],
  ['extend ttl a string', 'TYPE', () => held.extend('1s')],
  // use after release, loss, close
  ['release after release', 'NOT_HELD', () => released.release()],
  ['extend after release', 'NOT_HELD', () => released.extend()],
  ['release after loss', 'LOST', () => lost.release()],
  ['extend after loss', 'LOST', () => lost.extend(1000)],
  ['throwIfLost after loss', 'LOST', () => lost.throwIfLost()],
  ['a fence refuses a lost lease', 'LOST', () => fence.fencedExecute(lost, ['SELECT 1'])],
  ['acquire on a closed locker', 'CLOSED', () => closedLocker.acquire('x')],
  ['inspect on a closed locker', 'CLOSED', () => closedLocker.inspect('x')],
  [
    'nested withLock of the same name',
    'DEADLOCK',
    () => locker.withLock('outer', () => locker.withLock('outer', () => {})),
  ],
  [
    'nested tryAcquire of the same name',
    'DEADLOCK',
    () => locker.withLock('outer', () => locker.tryAcquire('outer')),
  ],
  // fences
  ['Fence.open: empty resource', 'INVALID_ARGUMENT', () => Fence.open(url, '')],
  ['Fence.open: url not a string', 'TYPE', () => Fence.open(null, 'r')],
  ['token a string', 'TYPE', () => fence.fencedExecute('12', ['SELECT 1'])],
  ['token negative', 'INVALID_ARGUMENT', () => fence.check(-1n)],
  ['token 2^63', 'INVALID_ARGUMENT', () => fence.check(2n ** 63n)],
  ['token a number above 2^53', 'TYPE', () => fence.check(2 ** 53 + 2)],
  ['token a fraction', 'TYPE', () => fence.check(1.5)],
  ['statements not an array', 'TYPE', () => fence.fencedExecute(1n, 'SELECT 1')],
  ['sql not a string', 'TYPE', () => fence.fencedExecute(1n, [[1]])],
  ['params not an array', 'TYPE', () => fence.fencedExecute(1n, [['SELECT ?', 1]])],
  ['parameter an object', 'TYPE', () => fence.fencedExecute(1n, [['SELECT ?', [{}]]])],
  ['parameter NaN', 'INVALID_ARGUMENT', () => fence.fencedExecute(1n, [['SELECT ?', [NaN]]])],
  [
    'parameter bigint above 64 bits',
    'INVALID_ARGUMENT',
    () => fence.fencedExecute(1n, [['SELECT ?', [2n ** 64n]]]),
  ],
  ['fencedSet value a number', 'TYPE', () => fence.fencedSet(1n, 'k', 5)],
  // panics
  ['a panic in a sync export', 'INTERNAL', () => hooks.panic()],
  ['a panic in an async export', 'INTERNAL', () => hooks.panicAsync()],
];

for (const [what, code, call] of cases) {
  test(`${what}: ${code}`, async () => {
    let outcome;
    try {
      outcome = await call();
    } catch (e) {
      if (code === 'TYPE') {
        assert.ok(e instanceof TypeError, `not a TypeError: ${e?.stack ?? e}`);
        assert.ok(!(e instanceof LockError), 'a wrong type is not a LockError');
        assert.equal(e.code, 'ERR_INVALID_ARG_TYPE', e.message);
        assert.ok(e.message.length > 5, `message too short: ${e.message}`);
        return;
      }
      assert.ok(e instanceof LockError, `not a LockError: ${e?.stack ?? e}`);
      assert.ok(e instanceof Error);
      assert.equal(e.code, code, `${e.code}: ${e.message}`);
      assert.equal(typeof e.message, 'string');
      assert.ok(e.message.length > 5, `message too short: ${e.message}`);
      assert.ok(!e.message.startsWith(`${code}: `), `the code in the message: ${e.message}`);
      return;
    }
    assert.fail(`expected ${code}, got ${outcome}`);
  });
}

// The code crosses from Rust as the error's `code` property (src/error.rs), never inside the
// message: a core message that itself begins like another code keeps its real code, and users
// read the message as the core wrote it. No public call echoes its input at the start of a
// message, hence the test hooks that fail with a core error of the test's choosing.
test('the code of a native error comes from its code property, not from its message', async () => {
  for (const code of fencelock.ERROR_CODES) {
    const decoy = code === 'TIMEOUT' ? 'LOST' : 'TIMEOUT';
    const message = `${decoy}: a message that begins like another code`;
    const ways = [
      ['thrown', hooks.rawCoreError, hooks.coreError],
      ['rejected', hooks.rawCoreErrorAsync, hooks.coreErrorAsync],
    ];
    for (const [how, raw, mapped] of ways) {
      const crossed = await raw(code, message);
      assert.equal(crossed.code, code, `${how}: ${crossed.code}: ${crossed.message}`);
      assert.equal(crossed.message, message, how);
      await assert.rejects(
        async () => mapped(code, message),
        (e) => e instanceof LockError && e.code === code && e.message === message,
        `${how} ${code}`,
      );
    }
  }
});

test("the driver's error is the cause: a DriverError naming the driver and its code", async () => {
  // SQLite's SQLITE_READONLY (8) under a BACKEND LockError.
  const readOnly = await connect(`${url}?mode=ro`);
  try {
    await assert.rejects(readOnly.tryAcquire('job'), (e) => {
      assert.ok(e instanceof LockError && e.code === 'BACKEND', String(e));
      assert.ok(e.cause instanceof fencelock.DriverError, String(e.cause));
      assert.ok(!(e.cause instanceof LockError));
      assert.deepEqual(
        [e.cause.name, e.cause.driver, e.cause.code],
        ['DriverError', 'sqlite', '8'],
      );
      assert.match(e.cause.message, /readonly|read-only/i);
      return true;
    });
  } finally {
    await readOnly.close();
  }
  // An error fencelock made without a driver has no cause.
  await assert.rejects(locker.acquire('x', { ttl: NaN }), (e) => e.cause === undefined);
});

// tests/servers.sh's Redis with ACLs (its `redis` group).
const redisAcl = server('redis', 'FENCELOCK_TEST_REDIS_ACL_URL');

test("a refused Redis password keeps the server's code as the cause", {
  skip: redisAcl.skip,
}, async () => {
  const wrong = redisAcl.url().replace(':fencelock-test@', ':hunter2-no@');
  await assert.rejects(connect(wrong), (e) => {
    assert.equal(e.code, 'AUTH', String(e));
    assert.deepEqual([e.cause?.driver, e.cause?.code], ['redis', 'WRONGPASS'], String(e.cause));
    assert.ok(!`${e.cause.message} ${e.cause.stack}`.includes('hunter2'));
    return true;
  });
});

test('async calls reject rather than throw synchronously', () => {
  const p = locker.acquire(42);
  assert.ok(p instanceof Promise);
  return assert.rejects(p, { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
});

test('messages name the bad option and never show a password', async () => {
  await assert.rejects(locker.acquire('x', { ttl: NaN }), /ttl/);
  await assert.rejects(locker.acquire('x', { wait: -5 }), /wait must not be negative/);
  await assert.rejects(locker.acquire('x', { timeout: 1 }), /ttl.*wait/);
  await assert.rejects(
    connect('postgres://user:hunter2-secret@127.0.0.1:1/db', { operationTimeout: 3_000 }),
    (e) => e.code === 'UNAVAILABLE' && !e.message.includes('hunter2-secret'),
  );
});

test('a bad FENCELOCK_RUNTIME_THREADS makes connect fail with INVALID_ARGUMENT naming it', async () => {
  const { spawnSync } = await import('node:child_process');
  const { fileURLToPath } = await import('node:url');
  const index = fileURLToPath(new URL('../index.js', import.meta.url));
  const url = `sqlite://${join(tempDir(), 'locks.db')}`;
  const script = `require(${JSON.stringify(index)}).connect(${JSON.stringify(url)})
  .then((l) => l.close().then(() => console.log('connected')), (e) => console.log(e.code + ': ' + e.message));`;
  for (const [value, expected] of [
    ['0', /^INVALID_ARGUMENT: FENCELOCK_RUNTIME_THREADS must be/],
    ['lots', /^INVALID_ARGUMENT: FENCELOCK_RUNTIME_THREADS/],
    ['2', /^connected/],
  ]) {
    const out = spawnSync(process.execPath, ['-e', script], {
      encoding: 'utf8',
      timeout: LONG,
      env: { ...process.env, FENCELOCK_RUNTIME_THREADS: value },
    });
    assert.equal(out.status, 0, out.stderr);
    assert.match(out.stdout, expected, `FENCELOCK_RUNTIME_THREADS=${value}`);
  }
});

// Every duration or timeout the API takes, with every odd number: each call either works (then
// is undone) or is refused with INVALID_ARGUMENT; never INTERNAL (a panic caught in Rust), never
// a crash of the process.
test('no duration or timeout reaches a panic: NaN, infinities, negatives and huge numbers', async () => {
  const odd = [
    NaN,
    Infinity,
    -Infinity,
    -1,
    -0,
    Number.MIN_VALUE,
    0.5,
    2 ** 53,
    2 ** 64,
    1e300,
    Number.MAX_VALUE,
  ];
  const lease = await locker.acquire('odd-durations', { ttl: 10_000 });
  const outcomes = { accepted: 0, refused: 0 };
  let n = 0;
  const fresh = () => `odd-${n++}`;
  const calls = {
    'connect operationTimeout': (ms) => connect(url, { operationTimeout: ms }),
    'connect pollInterval': (ms) => connect(url, { pollInterval: ms }),
    'Fence.open operationTimeout': (ms) =>
      Fence.open(url.replace('locks.db', 'odd-fence.db'), 'odd', { operationTimeout: ms }),
    'acquire ttl': (ms) => locker.acquire(fresh(), { ttl: ms }),
    'acquire wait': (ms) => locker.acquire(fresh(), { wait: ms }),
    'acquire maxHold': (ms) => locker.acquire(fresh(), { maxHold: ms }),
    'tryAcquire ttl': (ms) => locker.tryAcquire(fresh(), { ttl: ms }),
    'tryAcquire maxHold': (ms) => locker.tryAcquire(fresh(), { maxHold: ms }),
    'withLock ttl': (ms) => locker.withLock(fresh(), { ttl: ms }, () => null),
    'withLock wait': (ms) => locker.withLock(fresh(), { wait: ms }, () => null),
    'campaign ttl': (ms) => locker.campaign(fresh(), { ttl: ms }),
    'campaign wait': (ms) => locker.campaign(fresh(), { wait: ms }),
    'campaign maxHold': (ms) => locker.campaign(fresh(), { maxHold: ms }),
    'withLeadership ttl': (ms) => locker.withLeadership(fresh(), { ttl: ms }, () => null),
    'lease.extend': (ms) => lease.extend(ms),
  };
  for (const [what, call] of Object.entries(calls)) {
    for (const ms of odd) {
      let result;
      try {
        result = await call(ms);
      } catch (e) {
        assert.ok(e instanceof LockError, `${what}(${ms}): not a LockError: ${e?.stack ?? e}`);
        assert.equal(e.code, 'INVALID_ARGUMENT', `${what}(${ms}): ${e.code}: ${e.message}`);
        outcomes.refused++;
        continue;
      }
      outcomes.accepted++;
      // Accepted: undo it.
      if (typeof result?.close === 'function') await result.close();
      else if (typeof result?.release === 'function') await result.release();
      else if (typeof result?.resign === 'function') await result.resign();
    }
  }
  await lease.release();
  // Both kinds occur (-0 and 0.5 are fine for a wait, NaN never is): the sweep ran every call.
  assert.ok(outcomes.accepted > 0 && outcomes.refused > 0, JSON.stringify(outcomes));
  assert.equal(outcomes.accepted + outcomes.refused, Object.keys(calls).length * odd.length);
});
