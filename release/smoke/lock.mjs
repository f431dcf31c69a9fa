// Smoke test of the installed npm packages: two lockers on one SQLite file, the second is refused
// while the first holds the lock, and the next holder gets a larger token.
import { mkdtempSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'fencelock';

const url = `sqlite://${join(mkdtempSync(join(tmpdir(), 'fencelock-smoke-')), 'smoke.db')}`;
const first = await connect(url);
const second = await connect(url);
try {
  const lease = await first.acquire('smoke', { ttl: 10_000, wait: 5_000 });
  const rival = await second.tryAcquire('smoke', { ttl: 10_000 });
  if (rival !== null) throw new Error('a second locker acquired a held lock');
  await lease.release();
  const next = await second.acquire('smoke', { ttl: 10_000, wait: 5_000 });
  if (!(next.token > lease.token))
    throw new Error(`token did not increase: ${lease.token} then ${next.token}`);
  await next.release();
  const from = createRequire(import.meta.url).resolve('fencelock');
  console.log(`node: tokens ${lease.token} < ${next.token} from ${from}`);
} finally {
  await first.close();
  await second.close();
}
