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

// Each server backend by the name FENCELOCK_TEST_BACKENDS takes, as the Python and JVM suites
// read it, with the variable of its test server's URL (tests/servers.sh env).
const SERVER_VARIABLES = {
  redis: 'FENCELOCK_TEST_REDIS_URL',
  'redis-cluster': 'FENCELOCK_TEST_REDIS_CLUSTER_URL',
  redlock: 'FENCELOCK_TEST_REDLOCK_URL',
  zookeeper: 'FENCELOCK_TEST_ZK_URL',
  postgres: 'FENCELOCK_TEST_POSTGRES_URL',
  mariadb: 'FENCELOCK_TEST_MARIADB_URL',
};

const BACKEND_NAMES = ['sqlite', ...Object.keys(SERVER_VARIABLES)];

/**
 * The backends FENCELOCK_TEST_BACKENDS lists (comma-separated), or every one when it is unset
 * or empty. CI lists a few: the core's conformance suite runs the lock contract on every
 * backend, and the language suites test what the language adds (CONTRIBUTING.md, "Which tests
 * run where"). A name that is not a backend throws as this module loads, so a misspelt list
 * fails the run instead of quietly testing less.
 */
function selectedBackends() {
  const value = process.env.FENCELOCK_TEST_BACKENDS ?? '';
  const given = value
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '');
  if (given.length === 0) return new Set(BACKEND_NAMES);
  const unknown = given.filter((name) => !BACKEND_NAMES.includes(name));
  if (unknown.length > 0) {
    throw new Error(
      `FENCELOCK_TEST_BACKENDS=${value}: ${unknown.map((n) => JSON.stringify(n)).join(', ')} ` +
        `${unknown.length === 1 ? 'is not a backend' : 'are not backends'}; ` +
        `the backends are ${BACKEND_NAMES.join(', ')}`,
    );
  }
  return new Set(given);
}

const SELECTED = selectedBackends();

/** Why a test of `name` does not run, when FENCELOCK_TEST_BACKENDS leaves it out; else null. */
function leftOut(name) {
  if (SELECTED.has(name)) return null;
  return `${name} is not in FENCELOCK_TEST_BACKENDS (the soak runs the full matrix: tests/faults/run.sh soak)`;
}

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

/**
 * The backends a test runs on, each as `{ id, url() }` (`id` as FENCELOCK_TEST_BACKENDS names
 * it): SQLite, and each server backend whose FENCELOCK_TEST_*_URL is set, of those
 * FENCELOCK_TEST_BACKENDS lists.
 */
export function backends() {
  const list = [];
  if (SELECTED.has('sqlite'))
    list.push({ id: 'sqlite', url: () => `sqlite://${join(tempDir(), 'locks.db')}` });
  for (const [id, variable] of Object.entries(SERVER_VARIABLES)) {
    const url = process.env[variable];
    if (url && SELECTED.has(id)) list.push({ id, url: () => url });
  }
  return list;
}

/**
 * The test server of backend `name` for a test of that backend alone, read from `variable`
 * (by default the backend's FENCELOCK_TEST_*_URL; another server of the same backend, such as
 * Redis with ACLs, has a variable of its own): `{ skip, url() }`, `skip` being test()'s option.
 * The test skips, saying why, when FENCELOCK_TEST_BACKENDS leaves the backend out (even under
 * FENCELOCK_REQUIRE_SERVERS=1: the choice is deliberate), or when the variable is not set
 * outside CI; under FENCELOCK_REQUIRE_SERVERS=1 an unset variable fails the test, in url().
 */
export function server(name, variable = SERVER_VARIABLES[name]) {
  if (!(name in SERVER_VARIABLES)) throw new Error(`${name} is not a server backend`);
  const url = process.env[variable];
  const skip = leftOut(name) ?? (!url && !REQUIRE_SERVERS ? `${variable} is not set` : false);
  return {
    skip,
    url() {
      if (!url) throw new Error(`${variable} is not set, and FENCELOCK_REQUIRE_SERVERS=1`);
      return url;
    },
  };
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

/**
 * Polls `condition` (which may be async) every 20 ms until it holds; fails after `ms` saying
 * `what` did not happen.
 */
export async function until(condition, ms, what) {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
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
