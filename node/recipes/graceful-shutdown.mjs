// Recipe: a worker that holds a lock while it works, and on SIGTERM (a deploy, `docker stop`,
// Kubernetes) closes its Locker, which releases what it holds, before it exits: the next holder
// gets the lock at once instead of after the ttl.
//
//   FENCELOCK_URL=redis://127.0.0.1:6379 node graceful-shutdown.mjs
import { connect } from 'fencelock';

const locker = await connect(process.env.FENCELOCK_URL);
const lease = await locker.acquire('nightly-report', { ttl: 30_000 });
console.log(`holding ${lease.name} with token ${lease.tokenString}`);

const timer = setInterval(() => {
  // The work, step by step; a lost lease stops it.
  lease.throwIfLost();
}, 1_000);

process.once('SIGTERM', async () => {
  clearInterval(timer);
  await locker.close(); // releases every lease this Locker holds
  console.log('released, exiting');
  process.exit(0);
});
