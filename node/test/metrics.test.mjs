// Metrics (issue 13) in Node: connect(url, { metrics: true }) records the core's instruments into
// OpenTelemetry's JS API, so they reach the provider and exporter the application set up. Read
// back here through the SDK's MetricReader, on SQLite.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { metrics as otelMetrics } from '@opentelemetry/api';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';

import { fencelock, LONG, sleep, tempDir } from './helpers.mjs';

class TestReader extends MetricReader {
  async onForceFlush() {}
  async onShutdown() {}
}

// One provider for the test process, set before any Locker with metrics connects.
const reader = new TestReader();
otelMetrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));

/** "instrument|attr=value,..." -> counter sum or histogram count. */
async function snapshot() {
  const seen = new Map();
  const { resourceMetrics } = await reader.collect();
  for (const scope of resourceMetrics.scopeMetrics) {
    for (const metric of scope.metrics) {
      for (const point of metric.dataPoints) {
        const attributes = Object.entries(point.attributes)
          .map(([k, v]) => `${k}=${v}`)
          .sort()
          .join(',');
        const value = typeof point.value === 'number' ? point.value : point.value.count;
        seen.set(`${metric.descriptor.name}|${attributes}`, value);
      }
    }
  }
  return seen;
}

async function waitFor(key, atLeast) {
  // Measurements reach the JS thread through a queue: soon, not at once.
  const started = Date.now();
  for (;;) {
    const seen = await snapshot();
    if ((seen.get(key) ?? 0) >= atLeast) return seen;
    if (Date.now() - started > LONG)
      assert.fail(`${key} never reached ${atLeast}: ${JSON.stringify([...seen])}`);
    await sleep(50);
  }
}

const sqliteUrl = () => `sqlite://${join(tempDir(), 'locks.db')}`;

test("a lock's life shows in the host's OpenTelemetry, with the core's instrument table", async () => {
  const locker = await fencelock.connect(sqliteUrl(), { metrics: true });
  try {
    for (let i = 0; i < 3; i++)
      await locker.withLock('node-metrics', { ttl: 5_000 }, async () => {});
    const lease = await locker.acquire('node-metrics-lost', { ttl: 600 });
    await locker.forceRelease('node-metrics-lost');
    // Polled: the lease's signal does not keep the process alive by itself.
    for (const started = Date.now(); !lease.signal.aborted; await sleep(20)) {
      if (Date.now() - started > LONG) assert.fail('the forced release was never noticed');
    }
    await waitFor('fencelock.losses|backend=sqlite,reason=taken_over', 1);
    const seen = await waitFor('fencelock.lease.hold|backend=sqlite,outcome=released', 3);
    assert.ok(seen.get('fencelock.acquisitions|backend=sqlite') >= 4);
    assert.ok(seen.get('fencelock.acquire.duration|backend=sqlite') >= 4);
    assert.ok(seen.get('fencelock.acquire.wait|backend=sqlite') >= 4);
    for (const key of seen.keys()) assert.match(key, /\|backend=sqlite/);
  } finally {
    await locker.close();
  }
});

test('metrics are off by default, and bad values are typed errors', async () => {
  const key = 'fencelock.acquisitions|backend=sqlite';
  const before = (await snapshot()).get(key) ?? 0;
  const locker = await fencelock.connect(sqliteUrl());
  try {
    await locker.withLock('node-metrics-off', { ttl: 5_000 }, async () => {});
  } finally {
    await locker.close();
  }
  await sleep(300);
  assert.equal(
    (await snapshot()).get(key) ?? 0,
    before,
    'a Locker without metrics recorded metrics',
  );
  await assert.rejects(
    fencelock.connect(sqliteUrl(), { metrics: 'yes' }),
    (e) => e instanceof TypeError && e.code === 'ERR_INVALID_ARG_TYPE' && /metrics/.test(e.message),
  );
  await assert.rejects(
    fencelock.Fence.open(sqliteUrl(), 'r', { metrics: true }),
    (e) => e.code === 'INVALID_ARGUMENT' && /metrics/.test(e.message),
  );
});

test('metrics without @opentelemetry/api installed is a clear INVALID_ARGUMENT', () => {
  const dir = tempDir();
  const hide = join(dir, 'hide-otel.cjs');
  writeFileSync(
    hide,
    `const Module = require('node:module');
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === '@opentelemetry/api') throw Object.assign(new Error('not installed'), { code: 'MODULE_NOT_FOUND' });
  return resolve.call(this, request, ...rest);
};`,
  );
  const index = fileURLToPath(new URL('../index.js', import.meta.url));
  const script = `require(${JSON.stringify(index)}).connect(${JSON.stringify(sqliteUrl())}, { metrics: true })
  .then(() => console.log('connected'), (e) => console.log(e.code + ': ' + e.message));`;
  const out = spawnSync(process.execPath, ['-r', hide, '-e', script], {
    encoding: 'utf8',
    timeout: LONG,
  });
  assert.equal(out.status, 0, out.stderr);
  assert.match(out.stdout, /^INVALID_ARGUMENT: .*npm install @opentelemetry\/api/);
});
