// fencelock (Node binding) against node-redlock (redlock 5 on ioredis), same servers, one run.
//
//   cd bench/node && npm install && node bench.mjs
//
// Workloads:
//   1. uncontended cycle: acquire + release of one lock by one client, awaited one after another;
//   2. contended handoff: two clients alternate strictly on one lock, each waiting while the other
//      holds; the time from the holder's release to the waiter's acquisition is one handoff.
//      node-redlock runs with its default retry delay (200 ms, jitter 200 ms) and an unlimited
//      retry count (its default of 10 retries gives up under contention).
// Servers (loopback, `bash tests/servers.sh start redlock`): FENCELOCK_BENCH_REDIS_URL (default
// redis://127.0.0.1:7001, a master without replica, so neither side pays a replica WAIT) and
// FENCELOCK_BENCH_REDLOCK_URLS (default the five masters 7001-7005). The fencelock native module
// must be built (node/run-tests.sh builds a debug one; `npm run build` in node/ a release one:
// benchmark the release build). Prints a table with ratios; asserts nothing.
// FENCELOCK_BENCH_SUITE=redlock5 runs only the five-master cycle, in alternating rounds (below).
import { performance } from 'node:perf_hooks';
import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import Redlock from 'redlock';

import { connect } from '../../node/index.mjs';

const REDIS_URL = process.env.FENCELOCK_BENCH_REDIS_URL || 'redis://127.0.0.1:7001';
const REDLOCK_URLS = (
  process.env.FENCELOCK_BENCH_REDLOCK_URLS ||
  'redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003,redis://127.0.0.1:7004,redis://127.0.0.1:7005'
).split(',');
const CYCLES = Number(process.env.FENCELOCK_BENCH_CYCLES || 3000);
const HANDOFFS_FAST = Number(process.env.FENCELOCK_BENCH_HANDOFFS || 400);
const HANDOFFS_SLOW = Number(process.env.FENCELOCK_BENCH_SLOW_HANDOFFS || 30);
const TTL = 10_000;

function quantile(sorted, q) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

function stats(samples, elapsedMs) {
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    ops: (samples.length / elapsedMs) * 1000,
    p50: quantile(sorted, 0.5),
    p99: quantile(sorted, 0.99),
    n: samples.length,
  };
}

async function uncontended(cycle, n) {
  for (let i = 0; i < Math.min(200, n / 10); i++) await cycle(); // warm-up
  const lat = [];
  const start = performance.now();
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await cycle();
    lat.push(performance.now() - t);
  }
  return stats(lat, performance.now() - start);
}

// Two contenders alternate strictly: each, after releasing, waits until the other has the lock
// before asking again, and releases only once the other is waiting.
async function handoff(acquirers, rounds) {
  const lat = [];
  let lastRelease = null;
  let acquisitions = 0;
  const waiting = [false, false];
  const done = [false, false];
  const listeners = new Set();
  const notify = () => {
    for (const l of [...listeners]) l();
  };
  const until = (cond) =>
    cond()
      ? Promise.resolve()
      : new Promise((resolve) => {
          const l = () => {
            if (cond()) {
              listeners.delete(l);
              resolve();
            }
          };
          listeners.add(l);
        });
  const start = performance.now();
  async function worker(i) {
    for (let r = 0; r < rounds; r++) {
      waiting[i] = true;
      notify();
      const release = await acquirers[i]();
      const now = performance.now();
      waiting[i] = false;
      if (lastRelease !== null) lat.push(now - lastRelease);
      const mine = ++acquisitions;
      notify();
      await until(() => waiting[1 - i] || done[1 - i]);
      lastRelease = performance.now();
      await release();
      await until(() => acquisitions > mine || done[1 - i]);
    }
    done[i] = true;
    notify();
  }
  await Promise.all([worker(0), worker(1)]);
  return stats(lat, performance.now() - start);
}

function fencelockAcquirer(locker, name) {
  return async () => {
    const lease = await locker.acquire(name, { ttl: TTL });
    return () => lease.release();
  };
}

function redlockAcquirer(redlock, key) {
  return async () => {
    const lock = await redlock.acquire([key], TTL);
    return () => lock.release();
  };
}

function makeRedlock(urls, settings = {}) {
  const clients = urls.map((u) => new Redis(u, { lazyConnect: false, maxRetriesPerRequest: 1 }));
  return { redlock: new Redlock(clients, settings), clients };
}

const rows = [];

// FENCELOCK_BENCH_SUITE=redlock5: only the uncontended cycle over five masters, fencelock and
// node-redlock in alternating rounds (FENCELOCK_BENCH_RUNS, default 4, of FENCELOCK_BENCH_CYCLES
// cycles each), every round's ratio listed and their median: what issue 31 measures.
// FENCELOCK_BENCH_SUITE=cycle1: the same on one master (FENCELOCK_BENCH_REDIS_URL), the
// release awaited: what issue 32 measures.
async function alternating(urls, ourUrl, label) {
  const runs = Number(process.env.FENCELOCK_BENCH_RUNS || 4);
  const suiteId = randomUUID().slice(0, 8);
  const { redlock, clients } = makeRedlock(urls, { retryCount: -1 });
  const locker = await connect(ourUrl);
  const ratios = [];
  console.log(
    '| run | node-redlock ops/s (p50 ms) | fencelock ops/s (p50 ms) | fencelock vs node-redlock |',
  );
  console.log('|---|---|---|---|');
  for (let run = 1; run <= runs; run++) {
    const theirs = await uncontended(
      async () => (await redlock.acquire([`bench:alt:${suiteId}`], TTL)).release(),
      CYCLES,
    );
    const ours = await uncontended(
      async () => (await locker.acquire(`bench-alt-${suiteId}`, { ttl: TTL })).release(),
      CYCLES,
    );
    const ratio = ours.ops / theirs.ops;
    ratios.push(ratio);
    console.log(
      `| ${run} | ${theirs.ops.toFixed(0)} (${theirs.p50.toFixed(3)}) | ${ours.ops.toFixed(0)} (${ours.p50.toFixed(3)}) | ${ratio.toFixed(2)}x |`,
    );
  }
  const sorted = [...ratios].sort((x, y) => x - y);
  const mid = sorted.length / 2;
  const median = sorted.length % 2 ? sorted[Math.floor(mid)] : (sorted[mid - 1] + sorted[mid]) / 2;
  console.log(`\nmedian of ${runs} runs: **${median.toFixed(2)}x** node-redlock ${label}`);
  await locker.close();
  for (const c of clients) c.disconnect();
  process.exit(0);
}

if (process.env.FENCELOCK_BENCH_SUITE === 'redlock5') {
  await alternating(
    REDLOCK_URLS,
    `redlock://${REDLOCK_URLS.map((u) => u.replace(/^redis:\/\//, '')).join(',')}`,
    'over five masters',
  );
}
if (process.env.FENCELOCK_BENCH_SUITE === 'cycle1') {
  await alternating([REDIS_URL], REDIS_URL, 'on one master');
}

function row(workload, who, s) {
  rows.push({ workload, who, ...s });
  console.error(
    `${workload} | ${who}: ${s.ops.toFixed(0)} ops/s, p50 ${s.p50.toFixed(3)} ms, p99 ${s.p99.toFixed(3)} ms`,
  );
}

const id = randomUUID().slice(0, 8);
const single = await connect(REDIS_URL);
const { redlock: rl1, clients: c1 } = makeRedlock([REDIS_URL], { retryCount: -1 });
const { redlock: rl5, clients: c5 } = makeRedlock(REDLOCK_URLS, { retryCount: -1 });

row(
  'uncontended, 1 master',
  'node-redlock',
  await uncontended(async () => (await rl1.acquire([`bench:rl1:${id}`], TTL)).release(), CYCLES),
);
row(
  'uncontended, 1 master',
  'fencelock',
  await uncontended(
    async () => (await single.acquire(`bench-fl1-${id}`, { ttl: TTL })).release(),
    CYCLES,
  ),
);
row(
  'uncontended, 1 master',
  'fencelock, release pipelined',
  await uncontended(
    async () =>
      (await single.acquire(`bench-fl1p-${id}`, { ttl: TTL, pipelinedRelease: true })).release(),
    CYCLES,
  ),
);
row(
  'uncontended, 5 masters',
  'node-redlock',
  await uncontended(async () => (await rl5.acquire([`bench:rl5:${id}`], TTL)).release(), CYCLES),
);
let redlockLocker = null;
try {
  redlockLocker = await connect(
    `redlock://${REDLOCK_URLS.map((u) => u.replace(/^redis:\/\//, '')).join(',')}`,
  );
} catch (e) {
  console.error(`fencelock over 5 masters: not measured (${e.code}: ${e.message})`);
}
if (redlockLocker) {
  row(
    'uncontended, 5 masters',
    'fencelock',
    await uncontended(
      async () => (await redlockLocker.acquire(`bench-fl5-${id}`, { ttl: TTL })).release(),
      CYCLES,
    ),
  );
  row(
    'uncontended, 5 masters',
    'fencelock, release pipelined',
    await uncontended(
      async () =>
        (
          await redlockLocker.acquire(`bench-fl5p-${id}`, { ttl: TTL, pipelinedRelease: true })
        ).release(),
      CYCLES,
    ),
  );
}

const other = await connect(REDIS_URL);
row(
  'handoff, 1 master',
  'node-redlock (default retry delay)',
  await handoff(
    [
      redlockAcquirer(rl1, `bench:h1:${id}`),
      redlockAcquirer(makeRedlock([REDIS_URL], { retryCount: -1 }).redlock, `bench:h1:${id}`),
    ],
    HANDOFFS_SLOW,
  ),
);
row(
  'handoff, 1 master',
  'fencelock',
  await handoff(
    [fencelockAcquirer(single, `bench-h1-${id}`), fencelockAcquirer(other, `bench-h1-${id}`)],
    HANDOFFS_FAST,
  ),
);

console.log('\n| workload | library | ops/s | p50 ms | p99 ms | fencelock vs node-redlock |');
console.log('|---|---|---|---|---|---|');
for (const r of rows) {
  const base = rows.find((b) => b.workload === r.workload && b.who.startsWith('node-redlock'));
  const ratio =
    r.who === 'fencelock' && base
      ? `${(r.ops / base.ops).toFixed(2)}x ops/s, ${(base.p50 / r.p50).toFixed(1)}x p50`
      : '';
  console.log(
    `| ${r.workload} | ${r.who} | ${r.ops.toFixed(0)} | ${r.p50.toFixed(3)} | ${r.p99.toFixed(3)} | ${ratio} |`,
  );
}

await single.close();
await other.close();
if (redlockLocker) await redlockLocker.close();
for (const c of [...c1, ...c5]) c.disconnect();
process.exit(0);
