// The Redis fence: fencedSet checks the token and writes in one script.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { fencelock, connectOrSkip, fresh, REQUIRE_SERVERS } from './helpers.mjs';

const { Fence } = fencelock;
const REDIS_URL = process.env.FENCELOCK_TEST_REDIS_URL;

test('fencedSet accepts newer tokens and refuses stale ones', {
  skip: !REDIS_URL && !REQUIRE_SERVERS && 'FENCELOCK_TEST_REDIS_URL is not set',
}, async (t) => {
  assert.ok(REDIS_URL, 'FENCELOCK_REQUIRE_SERVERS=1 needs FENCELOCK_TEST_REDIS_URL');
  const locker = await connectOrSkip(t, REDIS_URL);
  if (!locker) return;
  const fence = await Fence.open(REDIS_URL, fresh('resource'));
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
