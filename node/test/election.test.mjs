// Leader election (issue 12) on every backend this machine offers: locker.campaign(),
// Leadership (term, signal, resign, asyncDispose), locker.leader() for observers.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { fencelock, backends, connectOrSkip, fresh, LONG, within } from './helpers.mjs';

const { Leadership, LockError } = fencelock;

for (const backend of backends()) {
  describe(`${backend.id}: leader election`, () => {
    test('one leader at a time; terms strictly increase across leaders; leader() sees term and holder; resign frees', async (t) => {
      const url = backend.url();
      const a = await connectOrSkip(t, url);
      if (!a) return;
      const b = await fencelock.connect(url, { operationTimeout: 10_000 });
      try {
        const name = fresh('election');
        assert.equal(await a.leader(name), null);
        const terms = [];
        let [leader, waiter] = [a, b];
        let current = await a.campaign(name, { holder: 'candidate a', ttl: 10_000 });
        for (let round = 0; round < 4; round += 1) {
          assert.ok(current instanceof Leadership);
          assert.equal(current.name, name);
          assert.equal(typeof current.term, 'bigint');
          assert.equal(current.isLeader, true);
          assert.equal(current.lease.token, current.term);
          assert.equal(current.signal.aborted, false);
          current.throwIfLost();
          terms.push(current.term);
          const seen = await waiter.leader(name);
          assert.equal(seen.term, current.term);
          assert.equal(seen.holder?.text, leader === a ? 'candidate a' : 'candidate b');
          await assert.rejects(waiter.campaign(name, { wait: 0 }), { code: 'TIMEOUT' });
          // The other candidate campaigns; it wins once the leader resigns, whether its first
          // try came before the resign or after. A mutex's waiters show only on ZooKeeper, so
          // nothing here waits for it to be waiting: the wake-up of a waiting candidate is the
          // conformance suite's (core/tests/it/conformance/election.rs).
          const next = waiter.campaign(name, {
            holder: waiter === a ? 'candidate a' : 'candidate b',
            ttl: 10_000,
          });
          await current.resign();
          assert.equal(current.isLeader, false);
          await assert.rejects(current.resign(), { code: 'NOT_HELD' });
          current = await within(next, LONG, 'the hand-over');
          [leader, waiter] = [waiter, leader];
        }
        terms.push(current.term);
        for (let i = 1; i < terms.length; i += 1)
          assert.ok(terms[i] > terms[i - 1], `terms ${terms.join(', ')}`);
        await current[Symbol.asyncDispose]();
        assert.equal(await b.leader(name), null);
      } finally {
        await a.close();
        await b.close();
      }
    });

    test('a loss (short ttl, no auto-renew) aborts leadership.signal', async (t) => {
      const a = await connectOrSkip(t, backend.url());
      if (!a) return;
      try {
        const leadership = await a.campaign(fresh('loss'), { ttl: 500, autoRenew: false });
        const { signal } = leadership;
        await within(
          new Promise((r) => signal.addEventListener('abort', r, { once: true })),
          60_000,
          'the loss',
        );
        assert.ok(signal.reason instanceof LockError && signal.reason.code === 'LOST');
        assert.equal(leadership.isLeader, false);
        assert.throws(() => leadership.throwIfLost(), { code: 'LOST' });
        await assert.rejects(leadership.resign(), { code: 'LOST' });
      } finally {
        await a.close();
      }
    });

    test('maxHold bounds a term, as in Python and on the JVM', async (t) => {
      const a = await connectOrSkip(t, backend.url());
      if (!a) return;
      try {
        const leadership = await a.campaign(fresh('max-hold'), { ttl: 2_000, maxHold: 500 });
        const { signal } = leadership;
        await within(
          new Promise((r) => signal.addEventListener('abort', r, { once: true })),
          60_000,
          'the end of the bounded term',
        );
        assert.ok(signal.reason instanceof LockError && signal.reason.code === 'LOST');
        assert.equal(leadership.isLeader, false);
      } finally {
        await a.close();
      }
    });

    test('close() steps down: a waiting candidate takes over with a larger term', async (t) => {
      const url = backend.url();
      const a = await connectOrSkip(t, url);
      if (!a) return;
      const b = await fencelock.connect(url, { operationTimeout: 10_000 });
      try {
        const name = fresh('close');
        const first = await a.campaign(name);
        // b gets the name only once a's close lets it go, whether b is waiting by then or not.
        const next = b.campaign(name);
        await a.close();
        const second = await within(next, LONG, 'the take-over after close');
        assert.ok(second.term > first.term);
        assert.equal(first.isLeader, false);
        assert.equal((await b.leader(name)).term, second.term);
        await second.resign();
      } finally {
        await a.close();
        await b.close();
      }
    });

    test('pipelinedRelease: a resigned term hands over to the next candidate, with a larger term', async (t) => {
      const url = backend.url();
      const a = await connectOrSkip(t, url);
      if (!a) return;
      const b = await fencelock.connect(url, { operationTimeout: 10_000 });
      try {
        const name = fresh('pipelined');
        for (let round = 0; round < 3; round += 1) {
          const first = await a.campaign(name, { pipelinedRelease: true, wait: LONG });
          await first.resign();
          assert.equal(first.isLeader, false);
          const second = await b.campaign(name, { pipelinedRelease: true, wait: LONG });
          assert.ok(second.term > first.term, `${second.term} after ${first.term}`);
          await second.resign();
        }
        await assert.rejects(a.campaign(name, { pipelinedRelease: 'yes' }), {
          name: 'TypeError',
          code: 'ERR_INVALID_ARG_TYPE',
        });
      } finally {
        await a.close();
        await b.close();
      }
    });

    test('withLeadership runs while leading and resigns after; campaign honours an AbortSignal', async (t) => {
      const a = await connectOrSkip(t, backend.url());
      if (!a) return;
      try {
        const name = fresh('with');
        const term = await a.withLeadership(name, async (leadership) => {
          assert.equal((await a.leader(name)).term, leadership.term);
          const controller = new AbortController();
          // The native call has started when campaign() returns: the abort goes through its
          // cancel handle, whether the core is waiting yet or not.
          const blocked = a.campaign(name, { signal: controller.signal });
          controller.abort();
          await assert.rejects(blocked, { name: 'AbortError' });
          return leadership.term;
        });
        assert.equal(typeof term, 'bigint');
        assert.equal(await a.leader(name), null);
      } finally {
        await a.close();
      }
    });
  });
}
