// Compiled by `tsc --noEmit` in run-tests.sh (never run): the public types as users see them.
import {
  connect,
  setLogger,
  type LockEvent,
  type LockList,
  type LogRecord,
  Fence,
  LockError,
  AbortError,
  DriverError,
  ERROR_CODES,
  type ErrorCode,
  type Lease,
  MultiLease,
  type LockInfo,
  type Leadership,
  type Leader,
  type LeaseInfo,
  type LockKind,
  type LockMode,
  type SemaphoreOptions,
} from 'fencelock';

async function example(): Promise<bigint> {
  const locker = await connect('sqlite:///tmp/x.db', {
    pollInterval: 50,
    operationTimeout: 10_000,
  });
  const controller = new AbortController();
  const lease: Lease = await locker.acquire('job', {
    ttl: 30_000,
    wait: null,
    signal: controller.signal,
    autoRenew: true,
  });
  const token: bigint = lease.token;
  const when: Date | null = lease.expiresAt;
  const deadline: Date = lease.validUntil;
  const lost: AbortSignal = lease.signal;
  const tokenText: string = lease.tokenString;
  const logged: { name: string; token: string; mode: string } = lease.toJSON();
  try {
    await lease.release();
  } catch (e) {
    if (e instanceof LockError && e.cause instanceof DriverError) {
      const driverCode: string = e.cause.code;
      const driver: string = e.cause.driver;
      console.log(driver, driverCode);
    }
  }
  const degraded: boolean = lease.isSuspended || lease.renewalFailing;
  lease.throwIfLost();
  await lease.extend(10_000);
  await lease.release();
  const maybe: Lease | null = await locker.tryAcquire('job', { ttl: 1_000 });
  const n: number = await locker.withLock('job', async (l) => Number(l.token));
  const s: string = await locker.withLock('job', { wait: 0 }, () => 'sync is fine');
  const info: LockInfo = await locker.inspect('job');
  const waiting: number = info.waiters.length;
  const listed: LockList = await locker.list('jo');
  const truncated: boolean = listed.truncated;
  await locker.forceRelease('job');
  locker.on('lost', (e: LockEvent) =>
    console.log(e.kind, e.token, e.reason, e.timestamp.getTime()),
  );
  locker.on('event', (e) => e.backend);
  setLogger((r: LogRecord) => console.log(r.level, r.message, r.lock), { level: 'debug' });
  setLogger(null);
  await connect('sqlite:///tmp/x.db', { logger: (r) => r.message, logLevel: 'warn' });
  await connect('sqlite:///tmp/x.db', { metrics: true });
  const nested: bigint = await locker.withLock('job', { reentrant: true }, () =>
    locker.withLock('job', { reentrant: true }, (inner) => inner.token),
  );
  const leadership: Leadership = await locker.campaign('reports', {
    ttl: 10_000,
    wait: null,
    signal: controller.signal,
    holder: 'me',
    autoRenew: true,
  });
  const term: bigint = leadership.term;
  const leading: boolean = leadership.isLeader;
  const onLoss: AbortSignal = leadership.signal;
  const termLease: Lease = leadership.lease;
  leadership.throwIfLost();
  await leadership.resign();
  const who: Leader | null = await locker.leader('reports');
  const whoTerm: bigint | undefined = who?.term;
  const ran: string = await locker.withLeadership('reports', async (l) => `term ${l.term}`);
  {
    await using led = await locker.campaign('reports');
    void led.term;
  }
  const semaphoreOptions: SemaphoreOptions = { permits: 3, ttl: 30_000, wait: 10_000 };
  const permit: Lease = await locker.semaphore('reports', {
    permits: 3,
    ttl: 30_000,
    wait: null,
    signal: controller.signal,
  });
  const permitMode: LockMode = permit.mode;
  const permitToken: bigint = permit.token;
  await permit.release();
  const reader: Lease = await locker.readLock('catalog', { wait: 0 });
  const writer: Lease = await locker.writeLock('catalog');
  {
    await using shared = await locker.readLock('catalog');
    await using alone = await locker.writeLock('catalog', { signal: controller.signal });
    await using one = await locker.semaphore('reports', semaphoreOptions);
    void [shared.mode, alone.token, one.signal];
  }
  const counted: number = await locker.withSemaphore('reports', { permits: 3 }, async (l) =>
    Number(l.token),
  );
  const read: string = await locker.withReadLock('catalog', (l) => l.mode);
  const readWith: LockMode = await locker.withReadLock('catalog', { ttl: 5_000 }, (l) => l.mode);
  const wrote: bigint = await locker.withWriteLock('catalog', async (l) => l.token);
  const wroteWith: boolean = await locker.withWriteLock('catalog', { wait: 0 }, () => true);
  const kinds: LockInfo = await locker.inspect('reports');
  const kind: LockKind = kinds.kind;
  const permits: number | null = kinds.permits;
  const holders: LeaseInfo[] = kinds.leases;
  for (const l of holders) {
    const m: LockMode = l.mode;
    const t: bigint | null = l.token;
    const left: number | null = l.timeLeft;
    const text: string | null | undefined = l.holder?.text;
    void [m, t, left, text];
  }
  // @ts-expect-error a semaphore needs its permits
  await locker.semaphore('reports', { ttl: 1_000 });
  // @ts-expect-error the permits are an option, not an argument
  await locker.semaphore('reports', 3);
  // @ts-expect-error modes are the core's spellings
  const notAMode: LockMode = 'shared';
  // @ts-expect-error readLock takes no permits
  await locker.readLock('catalog', { permits: 2 });
  if (kind === 'read-write lock' || kind === 'semaphore' || kind === 'mutex') void kind;
  const many: MultiLease = await locker.lockMany(['b', 'a'], {
    ttl: 30_000,
    wait: 10_000,
    signal: controller.signal,
    reentrant: true,
  });
  const manyNames: string[] = many.names;
  const manyTokens: Map<string, bigint> = many.tokens;
  const partA: Lease | undefined = many.part('a');
  const manyHeld: boolean = many.isHeld && !many.isLost;
  const manyLost: AbortSignal = many.signal;
  const manyUntil: Date = many.validUntil;
  const manyExpires: Date | null = many.expiresAt;
  many.throwIfLost();
  await many.extend();
  await many.extend(5_000);
  await many.release();
  if (many instanceof MultiLease) void many;
  const fromReadonly: readonly string[] = ['x', 'y'];
  await locker.lockMany(fromReadonly);
  {
    await using both = await locker.lockMany(['x', 'y']);
    void both.tokens.get('x');
  }
  const tokenSum: bigint = await locker.withLocks(['x', 'y'], async (locks) => {
    let sum = 0n;
    for (const [, t] of locks.tokens) sum += t;
    return sum;
  });
  const partToken: bigint | undefined = await locker.withLocks(
    ['x', 'y'],
    { wait: 0 },
    (locks) => locks.part('x')?.token,
  );
  // @ts-expect-error lockMany takes an array of names
  await locker.lockMany('x');
  // @ts-expect-error names are strings
  await locker.lockMany([1, 2]);
  const fence = await Fence.open('sqlite:///tmp/data.db', 'counter');
  if (partA) await fence.fencedExecute(partA, ['SELECT 1']);
  const rows: number[] = await fence.fencedExecute(lease, [
    ['UPDATE t SET n = ? WHERE id = ?', [1, 2n]],
    'SELECT 1',
    { sql: 'SELECT ?', params: [null] },
  ]);
  await fence.fencedSet(token, 'key', Buffer.from('v'));
  const highest: bigint | null = await fence.highest();
  {
    await using scoped = await locker.acquire('scoped');
    void scoped.name;
  }
  try {
    await locker.acquire('x');
  } catch (e) {
    if (e instanceof LockError) {
      const code: ErrorCode = e.code;
      if (code === 'TIMEOUT' || ERROR_CODES.includes(code)) void code;
    } else if (e instanceof AbortError) {
      void e.cause;
    }
  }
  await locker.close();
  void [
    when,
    deadline,
    lost,
    maybe,
    n,
    s,
    info,
    rows,
    highest,
    nested,
    term,
    leading,
    onLoss,
    termLease,
    who,
    whoTerm,
    ran,
    permitMode,
    permitToken,
    reader,
    writer,
    counted,
    read,
    readWith,
    wrote,
    wroteWith,
    permits,
    notAMode,
    manyNames,
    manyTokens,
    manyHeld,
    manyLost,
    manyUntil,
    manyExpires,
    tokenSum,
    partToken,
  ];
  return token;
}
void example;
