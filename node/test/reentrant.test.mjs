// Re-entry per execution scope (issue 11) on every backend this machine offers: a withLock
// callback is a scope (kept in AsyncLocalStorage, across awaits); the core counts re-entries.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { fencelock, backends, connectOrSkip, fresh, LONG, sleep, within } from './helpers.mjs';

const { LockError } = fencelock;

function aborted(signal, what) {
  if (signal.aborted) return Promise.resolve();
  return within(
    new Promise((r) => signal.addEventListener('abort', r, { once: true })),
    60_000,
    what,
  );
}

for (const backend of backends()) {
  describe(`${backend.id}: re-entrant locks`, () => {
    test('nested withLock with reentrant: same token; the inner exit keeps the lock; the outer exit frees it', async (t) => {
      const url = backend.url();
      const a = await connectOrSkip(t, url);
      if (!a) return;
      const b = await fencelock.connect(url, { operationTimeout: 10_000 });
      try {
        const name = fresh('nested');
        await a.withLock(name, { reentrant: true, ttl: 10_000 }, async (outer) => {
          await sleep(5); // across awaits
          const innerToken = await a.withLock(name, { reentrant: true }, async (inner) => {
            assert.equal(inner.token, outer.token);
            await sleep(5);
            // A third level, still the same scope.
            const third = await a.acquire(name, { reentrant: true });
            assert.equal(third.token, outer.token);
            await third.release();
            return inner.token;
          });
          assert.equal(innerToken, outer.token);
          assert.equal(outer.isHeld, true);
          assert.equal(await b.tryAcquire(name), null, 'the inner exit released the lock');
          assert.equal((await a.inspect(name)).token, outer.token);
        });
        const after = await b.tryAcquire(name);
        assert.ok(after, 'the outer exit did not free the lock');
        await after.release();
      } finally {
        await a.close();
        await b.close();
      }
    });

    test('out-of-order release of nested leases', async (t) => {
      const url = backend.url();
      const a = await connectOrSkip(t, url);
      if (!a) return;
      const b = await fencelock.connect(url, { operationTimeout: 10_000 });
      try {
        const name = fresh('order');
        await a.withLock(name, { reentrant: true }, async (outer) => {
          const one = await a.acquire(name, { reentrant: true });
          const two = await a.tryAcquire(name, { reentrant: true });
          assert.equal(one.token, outer.token);
          assert.equal(two.token, outer.token);
          await outer.release(); // the outermost first
          assert.equal(outer.isHeld, false);
          assert.equal(one.isHeld, true);
          assert.equal(await b.tryAcquire(name), null);
          await one.release();
          assert.equal(await b.tryAcquire(name), null);
          await assert.rejects(one.release(), { code: 'NOT_HELD' });
          await two.release(); // the last one releases on the server
          const other = await b.tryAcquire(name);
          assert.ok(other, 'the last release did not free the lock');
          assert.ok(other.token > outer.token);
          await other.release();
        });
      } finally {
        await a.close();
        await b.close();
      }
    });

    test("a loss while nested aborts every nested lease's signal", async (t) => {
      const a = await connectOrSkip(t, backend.url());
      if (!a) return;
      try {
        const name = fresh('nested-loss');
        await assert.rejects(
          a.withLock(name, { reentrant: true, ttl: 500, autoRenew: false }, async (outer) => {
            const inner = await a.acquire(name, { reentrant: true });
            const innermost = await a
              .withLock(name, { reentrant: true }, async (l) => {
                await aborted(l.signal, 'the innermost loss');
                return l;
              })
              .catch((e) => e);
            assert.ok(
              innermost instanceof LockError && innermost.code === 'LOST',
              `innermost: ${innermost}`,
            );
            await aborted(inner.signal, 'the inner loss');
            await aborted(outer.signal, 'the outer loss');
            for (const lease of [outer, inner]) {
              assert.equal(lease.isLost, true);
              assert.equal(lease.signal.reason.code, 'LOST');
            }
            await assert.rejects(inner.release(), { code: 'LOST' });
          }),
          { code: 'LOST' },
        );
      } finally {
        await a.close();
      }
    });

    test('without reentrant, acquiring a name the scope holds is DEADLOCK at once, naming the lock', async (t) => {
      const a = await connectOrSkip(t, backend.url());
      if (!a) return;
      try {
        const name = fresh('deadlock');
        const names = (e) =>
          e instanceof LockError &&
          e.code === 'DEADLOCK' &&
          e.message.includes(JSON.stringify(name));
        await a.withLock(name, async () => {
          await sleep(5);
          await assert.rejects(a.acquire(name), names);
          await assert.rejects(a.tryAcquire(name), names);
          await assert.rejects(
            a.withLock(name, () => {}),
            names,
          );
          // reentrant only on the nested call is enough: the scope holds it.
          await a.withLock(name, { reentrant: true }, () => {});
        });
      } finally {
        await a.close();
      }
    });

    test('concurrent top-level acquires are not scoped together; work started outside a scope contends', async (t) => {
      const a = await connectOrSkip(t, backend.url());
      if (!a) return;
      try {
        const name = fresh('top-level');
        // 20 concurrent acquires on one Locker, each its own scope: all wait their turn.
        let inside = 0;
        const tokens = await within(
          Promise.all(
            Array.from({ length: 20 }, async () => {
              const lease = await a.acquire(name, { reentrant: true, wait: LONG });
              inside += 1;
              assert.equal(inside, 1, 'two holders at once');
              await sleep(2);
              inside -= 1;
              const token = lease.token;
              await lease.release();
              return token;
            }),
          ),
          120_000,
          'the top-level acquires',
        );
        assert.equal(new Set(tokens).size, 20, 'a top-level acquire re-entered another');
        // A scope holds the lock; a tryAcquire started outside it (its own scope) gets null.
        let release;
        const held = new Promise((r) => (release = r));
        let entered;
        const inScope = new Promise((r) => (entered = r));
        const holder = a.withLock(name, { reentrant: true }, async () => {
          entered();
          await held;
        });
        await inScope;
        assert.equal(await a.tryAcquire(name, { reentrant: true }), null);
        await assert.rejects(a.acquire(name, { reentrant: true, wait: 200 }), { code: 'TIMEOUT' });
        release();
        await holder;
      } finally {
        await a.close();
      }
    });
  });
}
