// Shared helpers of the Node tests (not a test file itself).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';

import * as fencelock from '../index.mjs';

/** Node's own argument error, which fencelock throws for an argument of the wrong type. */
export function isWrongType(e) {
  return e instanceof TypeError && e.code === 'ERR_INVALID_ARG_TYPE';
}

export { fencelock };

// Generous margins: CI is a busy 2-core machine. No test asserts speed.
export const LONG = 30_000;

// CI sets FENCELOCK_REQUIRE_SERVERS=1: there a server that does not answer fails the test.
export const REQUIRE_SERVERS = process.env.FENCELOCK_REQUIRE_SERVERS === '1';

const SERVER_VARIABLES = [
  'FENCELOCK_TEST_REDIS_URL',
  'FENCELOCK_TEST_REDIS_CLUSTER_URL',
  'FENCELOCK_TEST_REDLOCK_URL',
  'FENCELOCK_TEST_ZK_URL',
  'FENCELOCK_TEST_POSTGRES_URL',
  'FENCELOCK_TEST_MARIADB_URL',
];

const made = [];
process.on('exit', () => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** A fresh temporary folder, removed when the process exits. */
export function tempDir() {
  const dir = mkdtempSync(join(tmpdir(), 'fencelock-node-'));
  made.push(dir);
  return dir;
}

/** SQLite always; each server backend whose FENCELOCK_TEST_*_URL is set. */
export function backends() {
  const list = [{ id: 'sqlite', url: () => `sqlite://${join(tempDir(), 'locks.db')}` }];
  for (const variable of SERVER_VARIABLES) {
    const url = process.env[variable];
    if (url)
      list.push({
        id: variable.slice('FENCELOCK_TEST_'.length, -'_URL'.length).toLowerCase(),
        url: () => url,
      });
  }
  return list;
}

const unusable = new Map();

/**
 * Connects to a backend, or skips the test (`null`) when its server does not answer, unless
 * FENCELOCK_REQUIRE_SERVERS=1, where that fails the test.
 */
export async function connectOrSkip(t, url, options = { operationTimeout: 10_000 }) {
  if (unusable.has(url)) {
    t.skip(unusable.get(url));
    return null;
  }
  try {
    return await fencelock.connect(url, options);
  } catch (e) {
    // Every backend is built in: only a server that does not answer (outside CI) is skipped.
    if (e.code === 'UNAVAILABLE' && !REQUIRE_SERVERS) {
      unusable.set(url, `${e.code}: ${e.message}`);
      t.skip(unusable.get(url));
      return null;
    }
    throw e;
  }
}

/** Server backends keep state between runs: every test uses names of its own. */
export function fresh(prefix) {
  return `node-${prefix}-${randomUUID().slice(0, 12)}`;
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Rejects after `ms`: a guard around waits that must end, which also keeps the loop alive. */
export function within(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Polls `condition` every 20 ms until it holds; fails after `ms` saying `what` did not happen. */
export async function until(condition, ms, what) {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${ms} ms`);
    await sleep(20);
  }
}

/**
 * Runs one SQL statement with Python's sqlite3 module in a child process and returns the rows.
 * Never in this process: a second SQLite library in a process that has the file open through
 * fencelock can delete a live WAL file (docs/sqlite.md, "One SQLite library per process").
 */
export function runSql(path, sql, params = []) {
  const code = [
    'import json, sqlite3, sys',
    'path, sql, params = json.loads(sys.stdin.read())',
    "params = [bytes.fromhex(p[4:]) if isinstance(p, str) and p.startswith('hex:') else p for p in params]",
    'con = sqlite3.connect(path, timeout=60)',
    'cur = con.execute(sql, params)',
    'rows = [[v.hex() if isinstance(v, bytes) else v for v in r] for r in cur.fetchall()]',
    'con.commit()',
    "print(json.dumps({'rows': rows, 'rowcount': cur.rowcount}))",
  ].join('\n');
  const encoded = params.map((p) => (Buffer.isBuffer(p) ? `hex:${p.toString('hex')}` : p));
  const done = spawnSync(process.env.PYTHON || 'python3', ['-c', code], {
    input: JSON.stringify([path, sql, encoded]),
    encoding: 'utf8',
    timeout: 120_000,
  });
  if (done.status !== 0) throw new Error(`sqlite helper failed: ${done.stderr || done.error}`);
  const answer = JSON.parse(done.stdout);
  if (/^\s*UPDATE/i.test(sql) && answer.rowcount < 1) throw new Error(`no row changed by ${sql}`);
  return answer.rows;
}

/** Makes somebody else the owner of `name` in a SQLite lock file, behind fencelock's back. */
export function takeOver(dbPath, name) {
  runSql(dbPath, 'UPDATE fencelock_locks SET owner = ?, token = token + 1 WHERE name = ?', [
    Buffer.alloc(16),
    Buffer.from(name, 'utf8'),
  ]);
}
