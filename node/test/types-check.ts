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
  ERROR_CODES,
  type ErrorCode,
  type Lease,
  type LockInfo,
  type Leadership,
  type Leader,
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
  const lost: AbortSignal = lease.signal;
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
  const fence = await Fence.open('sqlite:///tmp/data.db', 'counter');
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
  ];
  return token;
}
void example;
