// The Redis fence: fencedSet checks the token and writes in one script.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { fencelock, connectOrSkip, fresh, server } from './helpers.mjs';

const { Fence } = fencelock;
const redis = server('redis');

test('fencedSet accepts newer tokens and refuses stale ones', { skip: redis.skip }, async (t) => {
  const url = redis.url();
  const locker = await connectOrSkip(t, url);
  if (!locker) return;
  const fence = await Fence.open(url, fresh('resource'));
  try {
    const name = fresh('fenced');
    const key = `fencelock-test:${fresh('key')}`;
    const old = await locker.withLock(name, { ttl: 10_000 }, async (lease) => {
      await fence.fencedSet(lease, key, Buffer.from('old'));
      return lease.token;
    });
    await locker.withLock(name, { ttl: 10_000 }, async (lease) => {
      await fence.fencedSet(lease, key, 'new');
      await assert.rejects(fence.fencedSet(old, key, 'stale'), { code: 'STALE_TOKEN' });
      assert.equal(await fence.highest(), lease.token);
      await fence.check(lease.token);
      await assert.rejects(fence.check(old), { code: 'STALE_TOKEN' });
      await assert.rejects(fence.fencedExecute(lease, ['SELECT 1']), { code: 'INVALID_ARGUMENT' });
    });
  } finally {
    await fence.close();
    await locker.close();
  }
});
