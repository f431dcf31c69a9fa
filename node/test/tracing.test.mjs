// Tracing in Node: connect(url, { tracing: true }) and Fence.open(..., { tracing: true }) make
// spans of acquires (waiting included), extends, releases, renewals and fence writes through
// OpenTelemetry's JS API, children of the context active where each call was made (renewals:
// root spans linked to their acquire's); and a logger is called in the AsyncLocalStorage of the
// call that produced the record. Read back through the SDK's in-memory exporter, on every backend.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { AsyncLocalStorage } from 'node:async_hooks';
import { join } from 'node:path';

import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';

import { backends, connectOrSkip, fencelock, fresh, LONG, tempDir, until } from './helpers.mjs';

// One provider for the test process, set before any Locker traces.
const exporter = new InMemorySpanExporter();
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
trace.setGlobalTracerProvider(
  new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
);
const tracer = trace.getTracer('fencelock-tests');

const about = (span, name) =>
  span.attributes['fencelock.lock'] === name || span.attributes['fencelock.resource'] === name;
const spansOf = (name) => exporter.getFinishedSpans().filter((s) => about(s, name));
const named = (spans, name) => spans.filter((s) => s.name === name);
const parentId = (span) => span.parentSpanContext?.spanId ?? span.parentSpanId;
const dataUrl = () => `sqlite://${join(tempDir(), 'data.db')}`;

const BACKEND_OF_SCHEME = {
  sqlite: 'sqlite',
  redis: 'redis',
  rediss: 'redis',
  'redis+cluster': 'redis-cluster',
  redlock: 'redlock',
  zk: 'zookeeper',
  postgres: 'postgres',
  postgresql: 'postgres',
  mysql: 'mysql',
  mariadb: 'mysql',
};

for (const backend of backends()) {
  describe(backend.id, () => {
    test("a lock's life is spans under the caller's span", async (t) => {
      const url = backend.url();
      const rival = await connectOrSkip(t, url);
      if (!rival) return;
      const locker = await fencelock.connect(url, { tracing: true });
      const name = fresh('spans');
      const resource = fresh('fence');
      const fence = await fencelock.Fence.open(dataUrl(), resource, { tracing: true });
      let request;
      let lease;
      try {
        await tracer.startActiveSpan('request', async (span) => {
          request = span.spanContext();
          lease = await locker.acquire(name, { ttl: 1_500 });
          await until(
            () => named(spansOf(name), 'fencelock.renew').length >= 2,
            LONG,
            'two renewals',
          );
          await lease.extend();
          await fence.fencedExecute(lease, ['CREATE TABLE IF NOT EXISTS t (x)']);
          await lease.release();
          const newer = await rival.acquire(name);
          // Held by another client: a try-once acquire comes back empty.
          assert.equal(await locker.tryAcquire(name), null);
          await fence.fencedExecute(newer, []);
          await assert.rejects(fence.fencedExecute(lease.token, []), { code: 'STALE_TOKEN' });
          await newer.release();
          span.end();
        });
      } finally {
        await locker.close();
        await rival.close();
        await fence.close();
      }
      await until(
        () => named(spansOf(name), 'fencelock.acquire').length >= 2,
        LONG,
        'the acquire spans',
      );
      const spans = spansOf(name);
      const acquires = named(spans, 'fencelock.acquire');
      assert.deepEqual(
        acquires.map((s) => s.attributes['fencelock.outcome']),
        ['acquired', 'timeout'],
      );
      const [first] = acquires;
      assert.equal(BigInt(first.attributes['fencelock.token']), lease.token);
      assert.equal(first.attributes['fencelock.mode'], 'exclusive');
      assert.equal(first.attributes['fencelock.backend'], BACKEND_OF_SCHEME[url.split(':')[0]]);
      for (const span of spans.filter((s) => s.name !== 'fencelock.fence.write')) {
        assert.equal(span.attributes['fencelock.backend'], first.attributes['fencelock.backend']);
        if (span.name === 'fencelock.renew') continue;
        assert.equal(parentId(span), request.spanId, span.name);
        assert.equal(span.spanContext().traceId, request.traceId);
      }
      for (const renewal of named(spans, 'fencelock.renew')) {
        // A root span of its own trace, linked to the acquire that took the lease.
        assert.equal(parentId(renewal), undefined);
        assert.equal(renewal.attributes['fencelock.outcome'], 'renewed');
        assert.deepEqual(
          renewal.links.map((l) => l.context.spanId),
          [first.spanContext().spanId],
        );
      }
      assert.deepEqual(
        named(spans, 'fencelock.extend').map((s) => s.attributes['fencelock.outcome']),
        ['extended'],
      );
      assert.deepEqual(
        named(spans, 'fencelock.release').map((s) => s.attributes['fencelock.outcome']),
        ['released'],
      );
      await until(() => spansOf(resource).length >= 3, LONG, 'the fence write spans');
      const writes = spansOf(resource);
      assert.deepEqual(
        writes.map((s) => s.attributes['fencelock.outcome']),
        ['accepted', 'accepted', 'stale'],
      );
      // The stale write's token came bare: only the leases' tokens name their lock.
      assert.deepEqual(
        writes.map((s) => s.attributes['fencelock.lock']),
        [name, name, undefined],
      );
      for (const write of writes) {
        assert.equal(write.attributes['fencelock.backend'], 'sqlite');
        assert.equal(parentId(write), request.spanId);
      }
    });
  });
}

test('tracing is off by default', async () => {
  const url = `sqlite://${join(tempDir(), 'locks.db')}`;
  const name = fresh('untraced');
  const marker = fresh('traced');
  const locker = await fencelock.connect(url);
  await (await locker.acquire(name)).release();
  await locker.close();
  const traced = await fencelock.connect(url, { tracing: true });
  await (await traced.acquire(marker)).release();
  await traced.close();
  // The traced Locker's spans, delivered after the untraced one's would have been.
  await until(() => spansOf(marker).length >= 2, LONG, 'the traced spans');
  assert.deepEqual(spansOf(name), []);
});

test('tracing takes a boolean', async () => {
  await assert.rejects(fencelock.connect('sqlite:///tmp/x.db', { tracing: 'yes' }), {
    code: 'ERR_INVALID_ARG_TYPE',
  });
});

test("a call's log records reach the logger in its AsyncLocalStorage", async () => {
  const url = `sqlite://${join(tempDir(), 'locks.db')}`;
  const requests = new AsyncLocalStorage();
  const seen = [];
  const locker = await fencelock.connect(url, {
    logger: (record) => seen.push([record.message, requests.getStore()]),
    logLevel: 'warn',
  });
  const rival = await fencelock.connect(url);
  try {
    const name = fresh('logged');
    const lease = await locker.acquire(name, { autoRenew: false });
    await rival.forceRelease(name);
    // The extend finds the lock gone: the core logs the loss during this call.
    await requests.run('request-7', async () => {
      await assert.rejects(lease.extend(), { code: 'LOST' });
    });
    await until(
      () => seen.some(([message]) => message.includes('lease lost')),
      LONG,
      'the loss logged',
    );
    assert.deepEqual(
      seen.filter(([message]) => message.includes('lease lost')).map(([, request]) => request),
      ['request-7'],
    );
  } finally {
    fencelock.setLogger(null);
    await locker.close();
    await rival.close();
  }
});
