// The recipes of node/recipes/ run as written, against the real frameworks (devDependencies):
// graceful shutdown on SIGTERM, an Express handler, a NestJS provider.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { fencelock, LONG, tempDir, until } from './helpers.mjs';

const recipes = fileURLToPath(new URL('../recipes/', import.meta.url));

function sqliteUrl() {
  return `sqlite://${join(tempDir(), 'locks.db')}`;
}

test('graceful shutdown: SIGTERM closes the Locker and frees the lock at once', async () => {
  const url = sqliteUrl();
  const worker = spawn(process.execPath, [join(recipes, 'graceful-shutdown.mjs')], {
    env: { ...process.env, FENCELOCK_URL: url },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  worker.stdout.on('data', (chunk) => {
    out += chunk;
  });
  const exited = once(worker, 'exit');
  await until(() => out.includes('holding nightly-report'), LONG, 'the worker holding its lock');
  const locker = await fencelock.connect(url);
  try {
    assert.equal((await locker.inspect('nightly-report')).held, true);
    worker.kill('SIGTERM');
    const [code] = await exited;
    assert.equal(code, 0);
    assert.match(out, /released, exiting/);
    // Free now, not 30 s from now when its ttl would have run out.
    const lease = await locker.tryAcquire('nightly-report');
    assert.ok(lease, 'the lock was free as soon as the worker exited');
    await lease.release();
  } finally {
    worker.kill('SIGKILL');
    await locker.close();
  }
});

test('an Express handler takes the lock per request and answers with the token', async () => {
  const { createApp } = await import(join(recipes, 'express-handler.mjs'));
  const { app, locker } = await createApp(sqliteUrl());
  const server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  try {
    const { port } = server.address();
    const post = () =>
      fetch(`http://127.0.0.1:${port}/accounts/17/statements`, { method: 'POST' }).then(
        async (r) => ({ status: r.status, body: await r.json() }),
      );
    const answers = await Promise.all(Array.from({ length: 6 }, post));
    for (const { status, body } of answers) {
      assert.equal(status, 200, JSON.stringify(body));
      assert.equal(body.account, '17');
    }
    const tokens = answers.map(({ body }) => BigInt(body.token));
    assert.equal(new Set(tokens).size, tokens.length, 'each request held the lock anew');
    assert.equal((await locker.inspect('account-17')).held, false, 'released after each');
  } finally {
    server.close();
    await locker.close();
  }
});

test('a NestJS provider connects at module start and closes at shutdown', async () => {
  const { NestFactory } = await import('@nestjs/core');
  const { LocksModule, LockerService } = await import(join(recipes, 'nest-provider.mjs'));
  const saved = process.env.FENCELOCK_URL;
  process.env.FENCELOCK_URL = sqliteUrl();
  try {
    const app = await NestFactory.createApplicationContext(LocksModule, { logger: false });
    const service = app.get(LockerService);
    const token = await service.withLock('report', { ttl: 10_000 }, async (lease) => lease.token);
    assert.equal(typeof token, 'bigint');
    const { locker } = service;
    await app.close();
    await assert.rejects(locker.inspect('report'), { code: 'CLOSED' });
  } finally {
    if (saved === undefined) delete process.env.FENCELOCK_URL;
    else process.env.FENCELOCK_URL = saved;
  }
});
