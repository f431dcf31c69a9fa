// The API's shape on SQLite (no server needed): leases, tokens, options, withLock, disposal,
// inspect, close, fences, panics, and both entry points.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

import { fencelock, LONG, tempDir, runSql, within, sleep, until } from './helpers.mjs';
import * as hooks from './hooks.mjs';

const { connect, Fence, LockError } = fencelock;
const require = createRequire(import.meta.url);

async function sqliteLocker() {
  const dir = tempDir();
  return { locker: await connect(`sqlite://${join(dir, 'locks.db')}`), dir };
}

test('acquire gives a lease with a bigint token, a name and an expiry', async () => {
  const { locker } = await sqliteLocker();
  try {
    const before = Date.now();
    const lease = await locker.acquire('basic', { ttl: 10_000 });
    assert.equal(lease.name, 'basic');
    assert.equal(typeof lease.token, 'bigint');
    assert.ok(lease.token > 0n && lease.token < 1n << 63n);
    assert.ok(lease.expiresAt instanceof Date);
    assert.ok(
      lease.expiresAt.getTime() >= before + 9_000 &&
        lease.expiresAt.getTime() <= Date.now() + 10_000,
    );
    assert.equal(lease.isHeld, true);
    assert.equal(lease.isLost, false);
    assert.equal(lease.signal.aborted, false);
    lease.throwIfLost();
    const info = await locker.inspect('basic');
    assert.equal(info.held, true);
    assert.equal(info.token, lease.token);
    assert.equal(info.holder.language, 'node');
    assert.equal(info.holder.pid, process.pid);
    await lease.extend(20_000);
    assert.ok(lease.expiresAt.getTime() >= before + 19_000);
    await lease.extend();
    await lease.release();
    assert.equal(lease.isHeld, false);
    assert.equal((await locker.inspect('basic')).held, false);
  } finally {
    await locker.close();
  }
});

test('a lease logs as JSON: name, token as a decimal string, mode; tokenString', async () => {
  const { locker } = await sqliteLocker();
  try {
    const lease = await locker.acquire('logged', { ttl: 10_000 });
    assert.equal(lease.tokenString, lease.token.toString());
    assert.deepEqual(JSON.parse(JSON.stringify({ lease })), {
      lease: { name: 'logged', token: lease.tokenString, mode: 'exclusive' },
    });
    assert.doesNotThrow(() => JSON.stringify({ token: lease.tokenString }));
    await lease.release();
  } finally {
    await locker.close();
  }
});

test('a failing renewal shows as renewalFailing and isSuspended until a renewal succeeds', async () => {
  const dir = tempDir();
  const path = join(dir, 'locks.db');
  // busy_timeout_ms=0: a renewal that meets another writer's lock fails at once (and is retried).
  const locker = await connect(`sqlite://${path}?busy_timeout_ms=0`);
  const { spawn } = await import('node:child_process');
  let blocker;
  try {
    const lease = await locker.acquire('renewing', { ttl: 6_000 });
    assert.equal(lease.renewalFailing, false);
    assert.equal(lease.isSuspended, false);
    // Another process holds SQLite's write lock until its stdin closes.
    blocker = spawn(
      process.env.PYTHON || 'python3',
      [
        '-c',
        'import sqlite3, sys\n' +
          'con = sqlite3.connect(sys.argv[1], isolation_level=None)\n' +
          'con.execute("BEGIN EXCLUSIVE")\n' +
          'print("locked", flush=True)\n' +
          'sys.stdin.read()\n' +
          'con.execute("ROLLBACK")\n',
        path,
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    await new Promise((resolve, reject) => {
      blocker.stdout.once('data', resolve);
      blocker.once('exit', () => reject(new Error('the blocking process exited early')));
    });
    await until(() => lease.renewalFailing, LONG, 'a failed renewal');
    assert.equal(lease.isSuspended, true);
    assert.equal(lease.isHeld, true, 'failing, not lost');
    blocker.stdin.end();
    await until(() => !lease.renewalFailing, LONG, 'a renewal after the failure');
    assert.equal(lease.isSuspended, false);
    assert.equal(lease.isHeld, true);
    await lease.release();
  } finally {
    blocker?.stdin.end();
    await locker.close();
  }
});

test('tryAcquire gives null when held; acquire with a wait times out with TIMEOUT', async () => {
  const { locker } = await sqliteLocker();
  try {
    const lease = await locker.acquire('busy');
    assert.equal(await locker.tryAcquire('busy'), null);
    await assert.rejects(
      locker.acquire('busy', { wait: 200 }),
      (e) => e instanceof LockError && e.code === 'TIMEOUT',
    );
    await assert.rejects(locker.acquire('busy', { wait: 0 }), { code: 'TIMEOUT' });
    await lease.release();
    const again = await locker.tryAcquire('busy');
    assert.ok(again !== null && again.token > lease.token);
    await again.release();
  } finally {
    await locker.close();
  }
});

test('withLock runs the function holding the lock and releases after it', async () => {
  const { locker } = await sqliteLocker();
  try {
    const result = await locker.withLock('scoped', { ttl: 10_000 }, async (lease) => {
      assert.equal((await locker.inspect('scoped')).token, lease.token);
      // The callback's own scope holds it: tryAcquire is DEADLOCK there (the core's rule), not null.
      await assert.rejects(locker.tryAcquire('scoped'), { code: 'DEADLOCK' });
      return 42;
    });
    assert.equal(result, 42);
    assert.equal((await locker.inspect('scoped')).held, false);
    // Without options; an error from the function wins and the lock is still released.
    await assert.rejects(
      locker.withLock('scoped', async () => {
        throw new RangeError('the work failed');
      }),
      RangeError,
    );
    assert.equal((await locker.inspect('scoped')).held, false);
    // Releasing inside is quiet.
    assert.equal(
      await locker.withLock('scoped', async (lease) => {
        await lease.release();
        return 'ok';
      }),
      'ok',
    );
  } finally {
    await locker.close();
  }
});

test('a nested withLock or acquire of the same name in the same scope is DEADLOCK, not a hang', async () => {
  const { locker } = await sqliteLocker();
  try {
    await locker.withLock('outer', async () => {
      await assert.rejects(
        locker.withLock('outer', async () => {}),
        { code: 'DEADLOCK' },
      );
      await assert.rejects(locker.acquire('outer'), { code: 'DEADLOCK' });
      // tryAcquire too (the core's rule, the same in every language): the name is the scope's own.
      await assert.rejects(
        locker.tryAcquire('outer'),
        (e) => e.code === 'DEADLOCK' && e.message.includes('"outer"'),
      );
      // Another name nests fine.
      await locker.withLock('inner', async () => {});
    });
    // Outside the scope the name is free again.
    await (await locker.acquire('outer')).release();
  } finally {
    await locker.close();
  }
});

test('Symbol.asyncDispose releases; quiet after an explicit release', async () => {
  const { locker } = await sqliteLocker();
  const dispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');
  try {
    const lease = await locker.acquire('disposed');
    assert.equal(typeof lease[dispose], 'function');
    await lease[dispose]();
    assert.equal((await locker.inspect('disposed')).held, false);
    await lease[dispose]();
    await assert.rejects(lease.release(), { code: 'NOT_HELD' });
    await assert.rejects(lease.extend(), { code: 'NOT_HELD' });
    assert.throws(() => lease.throwIfLost(), { code: 'NOT_HELD' });
  } finally {
    await locker[dispose]();
  }
  assert.equal(locker.closed, true);
});

test('close releases what the locker holds; later calls are CLOSED', async () => {
  const { locker, dir } = await sqliteLocker();
  const lease = await locker.acquire('kept');
  await locker.close();
  await locker.close();
  await assert.rejects(lease.release(), { code: 'NOT_HELD' });
  await assert.rejects(locker.acquire('kept'), { code: 'CLOSED' });
  const other = await connect(`sqlite://${join(dir, 'locks.db')}`);
  try {
    const again = await other.tryAcquire('kept');
    assert.ok(again !== null);
    await again.release();
  } finally {
    await other.close();
  }
});

test('a fence takes a lease or a bigint, refuses older tokens and rolls back', async () => {
  const { locker, dir } = await sqliteLocker();
  const dataPath = join(dir, 'data.db');
  const fence = await Fence.open(`sqlite://${dataPath}`, 'counter');
  try {
    assert.equal(fence.resource, 'counter');
    assert.equal(await fence.highest(), null);
    const setup = await Fence.open(`sqlite://${dataPath}`, 'setup');
    await setup.fencedExecute(0n, [
      'CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL, note TEXT, blob BLOB, f REAL)',
      ['INSERT INTO counter (id, n) VALUES (?, ?)', [1, 0]],
    ]);
    await setup.close();
    const first = await locker.acquire('fenced');
    await first.release();
    const second = await locker.acquire('fenced');
    const rows = await fence.fencedExecute(second, [
      {
        sql: 'UPDATE counter SET n = n + 1, note = ?, blob = ?, f = ? WHERE id = ?',
        params: ['text', Buffer.from([1, 2]), 1.5, 1n],
      },
    ]);
    assert.deepEqual(rows, [1]);
    assert.equal(await fence.highest(), second.token);
    await fence.check(second);
    await fence.check(second.token);
    await assert.rejects(fence.check(first.token), { code: 'STALE_TOKEN' });
    await assert.rejects(fence.fencedExecute(first.token, ['UPDATE counter SET n = 100']), {
      code: 'STALE_TOKEN',
    });
    await assert.rejects(fence.fencedExecute(first, ['UPDATE counter SET n = 100']), {
      code: 'NOT_HELD',
    });
    // A failing statement rolls the whole transaction back.
    await assert.rejects(
      fence.fencedExecute(second, ['UPDATE counter SET n = 100', 'INSERT INTO nowhere VALUES (1)']),
      { code: 'BACKEND' },
    );
    await assert.rejects(fence.fencedSet(second, 'k', 'v'), { code: 'INVALID_ARGUMENT' });
    await second.release();
  } finally {
    await fence.close();
    await locker.close();
  }
  assert.deepEqual(runSql(dataPath, 'SELECT n, note, hex(blob), f FROM counter'), [
    [1, 'text', '0102', 1.5],
  ]);
});

test('a fence reads its database read-only, with no second SQLite in the process', async () => {
  const { locker, dir } = await sqliteLocker();
  const path = join(dir, 'locks.db');
  // The lock file itself, read through a fence on it: the reproduction of node:sqlite's hazard
  // (docs/sqlite.md), where a second SQLite library lost every write after its first close.
  const fence = await Fence.open(`sqlite://${path}`, 'reads');
  try {
    const seen = [];
    for (const name of ['a', 'b', 'c']) {
      await (await locker.acquire(name)).release();
      const rows = await fence.query('SELECT name FROM fencelock_locks ORDER BY name');
      seen.push(rows.map(([n]) => n.toString()));
    }
    assert.deepEqual(seen, [['a'], ['a', 'b'], ['a', 'b', 'c']]);
    const lease = await locker.acquire('writer');
    await fence.fencedExecute(lease, [
      'CREATE TABLE kv (k TEXT PRIMARY KEY, v)',
      [
        'INSERT INTO kv VALUES (?, ?), (?, ?), (?, ?), (?, ?), (?, ?)',
        ['i', 7, 'f', 1.5, 's', 'text', 'b', Buffer.from([0, 255]), 'big', 1n << 60n],
      ],
    ]);
    assert.deepEqual(await fence.query('SELECT v FROM kv WHERE k = ?', ['i']), [[7]]);
    assert.deepEqual(await fence.query('SELECT k, v FROM kv ORDER BY k'), [
      ['b', Buffer.from([0, 255])],
      ['big', 1n << 60n],
      ['f', 1.5],
      ['i', 7],
      ['s', 'text'],
    ]);
    assert.deepEqual(await fence.query('SELECT v FROM kv WHERE k = ?', ['none']), []);
    // A write is refused and lands nowhere.
    await assert.rejects(fence.query('DELETE FROM kv'), { code: 'INVALID_ARGUMENT' });
    assert.equal((await fence.query('SELECT k FROM kv')).length, 5);
    await assert.rejects(fence.query('SELECT * FROM nowhere'), { code: 'BACKEND' });
    await assert.rejects(fence.query('SELECT ?', [{}]), { code: 'ERR_INVALID_ARG_TYPE' });
    await assert.rejects(fence.query('SELECT ?', 'i'), { code: 'ERR_INVALID_ARG_TYPE' });
    await lease.release();
  } finally {
    await fence.close();
    await locker.close();
  }
  // Another process sees every write.
  const names = runSql(path, 'SELECT name FROM fencelock_locks WHERE length(name) = 1');
  assert.equal(names.length, 3);
});

test('a panic in Rust surfaces as code INTERNAL, never a crash', async () => {
  assert.throws(
    () => hooks.panic(),
    (e) => e instanceof LockError && e.code === 'INTERNAL' && /panic/.test(e.message),
  );
  await assert.rejects(
    hooks.panicAsync(),
    (e) => e instanceof LockError && e.code === 'INTERNAL' && /panic/.test(e.message),
  );
  // The module still works afterwards.
  const { locker } = await sqliteLocker();
  await (await locker.acquire('after-panic')).release();
  await locker.close();
});

test('the CommonJS and ESM entry points export the same objects', () => {
  const cjs = require('../index.js');
  assert.equal(cjs.connect, fencelock.connect);
  assert.equal(cjs.LockError, fencelock.LockError);
  assert.deepEqual(
    [...cjs.ERROR_CODES],
    [
      'TIMEOUT',
      'LOST',
      'NOT_HELD',
      'UNAVAILABLE',
      'INVALID_ARGUMENT',
      'AUTH',
      'STALE_TOKEN',
      'BACKEND',
      'DEADLOCK',
      'CLOSED',
      'INTERNAL',
    ],
  );
  assert.equal(typeof fencelock.version, 'string');
  assert.throws(() => new fencelock.Lease(), TypeError);
});

test('the test hooks are not reachable from what users import or install', async () => {
  // This module was built with them (node/run-tests.sh), so the checks below can fail.
  assert.ok(hooks.nativeHookNames.includes('_testPanic'), hooks.nativeHookNames.join(', '));
  // The package by its name, as users import it (a package may import itself that way).
  const imported = await import('fencelock');
  for (const [how, api] of [
    ['require', require('fencelock')],
    ['import', imported],
    ['import default', imported.default],
  ]) {
    assert.deepEqual(
      Object.keys(api).filter((name) => name.startsWith('_test')),
      [],
      how,
    );
  }
  for (const path of ['fencelock/test/hooks.mjs', 'fencelock/lib/native.js']) {
    assert.throws(() => require.resolve(path), { code: 'ERR_PACKAGE_PATH_NOT_EXPORTED' }, path);
    await assert.rejects(import(path), { code: 'ERR_PACKAGE_PATH_NOT_EXPORTED' }, path);
  }
  // What npm packs: every path a "files" entry covers, read as npm does (from the package
  // root; a folder with its contents; * within one path segment).
  const root = new URL('../', import.meta.url);
  const { files } = JSON.parse(readFileSync(new URL('package.json', root), 'utf8'));
  const covers = (entry, path) => {
    const pattern = entry
      .replace(/\/$/, '')
      .replace(/[.+?^${}()|[\]\\]/g, '\\$&')
      .replaceAll('*', '[^/]*');
    return new RegExp(`^${pattern}(/.*)?$`).test(path);
  };
  const packed = (path) => files.some((entry) => covers(entry, path));
  assert.ok(packed('index.js') && packed('lib/error.js') && packed('fencelock.linux-x64-gnu.node'));
  assert.equal(packed('test/hooks.mjs'), false, files.join(', '));
  assert.doesNotMatch(readFileSync(new URL('index.d.ts', root), 'utf8'), /_test/);
});

test('the lease signal fires when a lease expires without renewal', async () => {
  const { locker } = await sqliteLocker();
  try {
    const lease = await locker.acquire('short', { ttl: 300, autoRenew: false });
    const signal = lease.signal;
    const aborted = new Promise((resolve) =>
      signal.addEventListener('abort', resolve, { once: true }),
    );
    await within(aborted, LONG, 'the lost signal');
    assert.equal(signal.aborted, true);
    assert.ok(signal.reason instanceof LockError && signal.reason.code === 'LOST');
    assert.equal(lease.isLost, true);
  } finally {
    await locker.close();
  }
});

test('a process holding leases (renewing, with lost signals wired) exits normally', async () => {
  const { spawnSync } = await import('node:child_process');
  const { writeFileSync } = await import('node:fs');
  const dir = tempDir();
  const script = join(dir, 'holder.mjs');
  const entry = new URL('../index.mjs', import.meta.url).href;
  writeFileSync(
    script,
    `import { connect } from '${entry}';
const locker = await connect(process.argv[2]);
const lease = await locker.acquire('exiting', { ttl: 300 });
lease.signal.addEventListener('abort', () => console.log('aborted'));
const short = await locker.acquire('exiting-short', { ttl: 200, autoRenew: false });
void short.signal;
console.log('held', lease.token);
`,
  );
  const r = spawnSync(process.execPath, [script, `sqlite://${join(dir, 'locks.db')}`], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^held \d+n$/m);
});

test('a lease dropped without release is released in the background once collected', async () => {
  const { spawnSync } = await import('node:child_process');
  const { writeFileSync } = await import('node:fs');
  const dir = tempDir();
  const url = `sqlite://${join(dir, 'locks.db')}`;
  const script = join(dir, 'dropper.mjs');
  const entry = new URL('../index.mjs', import.meta.url).href;
  writeFileSync(
    script,
    `import { connect } from '${entry}';
const locker = await connect(process.argv[2]);
await (async () => { await locker.acquire('dropped', { ttl: 10000 }); })();
for (let i = 0; i < 100 && (await locker.inspect('dropped')).held; i++) {
  global.gc();
  await new Promise((r) => setTimeout(r, 50));
}
console.log((await locker.inspect('dropped')).held ? 'still held' : 'released');
await locker.close();
`,
  );
  const r = spawnSync(process.execPath, ['--expose-gc', script, url], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout.trim(), 'released');
});

test('pipelinedRelease: release resolves once sent and the lock is free for the next holder', async () => {
  const url = `sqlite://${join(tempDir(), 'pipelined.db')}`;
  const locker = await fencelock.connect(url);
  const rival = await fencelock.connect(url);
  try {
    let last = 0n;
    for (let i = 0; i < 3; i++) {
      const lease = await locker.acquire('pipelined', { pipelinedRelease: true, wait: 10_000 });
      assert.ok(lease.token > last);
      last = lease.token;
      await lease.release();
      assert.equal(lease.isHeld, false);
    }
    const next = await rival.acquire('pipelined', { wait: 10_000 });
    assert.ok(next.token > last);
    await next.release();
    await assert.rejects(locker.acquire('x', { pipelinedRelease: 'yes' }), {
      name: 'TypeError',
      code: 'ERR_INVALID_ARG_TYPE',
    });
  } finally {
    await locker.close();
    await rival.close();
  }
});

test('a logger whose event loop is busy queues a bounded number of records and counts the dropped', async () => {
  const total = 50_000;
  let received = 0;
  fencelock.setLogger(
    (record) => {
      if (record.message.startsWith('test flood record')) received++;
    },
    { level: 'warn' },
  );
  try {
    // Emitted on this thread: the event loop takes none of them until the call returns.
    hooks.floodLogs(total);
    const deadline = Date.now() + LONG;
    while (received + fencelock.droppedLogRecords() < total && Date.now() < deadline) {
      await sleep(20);
    }
    const dropped = fencelock.droppedLogRecords();
    assert.ok(received + dropped >= total, `received ${received}, dropped ${dropped}`);
    // What waited: the core's queue (10,000, the newest) and napi's (1,024, the oldest).
    assert.ok(received >= 10_000 && received <= 10_000 + 1_024 + 1, `received ${received}`);
    assert.ok(dropped >= total - received, `dropped ${dropped}`);
  } finally {
    fencelock.setLogger(null);
  }
});
