import { EventEmitter } from 'node:events';

// fencelock: distributed locks with fencing tokens. Durations are milliseconds.

/** Every error code (docs/design.md §6.1); stable, never renamed. */
export type ErrorCode =
  | 'TIMEOUT'
  | 'LOST'
  | 'NOT_HELD'
  | 'UNAVAILABLE'
  | 'INVALID_ARGUMENT'
  | 'AUTH'
  | 'STALE_TOKEN'
  | 'BACKEND'
  | 'DEADLOCK'
  | 'CLOSED'
  | 'INTERNAL';

export declare const ERROR_CODES: readonly ErrorCode[];

/**
 * Every failure of fencelock: an Error with a stable `code`. An argument of the wrong type (a
 * number where a string goes, a non-function callback) is Node's own argument error instead: a
 * `TypeError` with `code: 'ERR_INVALID_ARG_TYPE'`, outside the shared codes; a value of the
 * right type that is out of range is a LockError `INVALID_ARGUMENT`.
 */
export declare class LockError extends Error {
  readonly name: 'LockError';
  readonly code: ErrorCode;
  /** The driver's own error, when the failure came from one (a refused password, a dropped connection). */
  readonly cause?: DriverError | unknown;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown });
}

/**
 * The error a driver reported, kept as the `cause` of the LockError made from it. Not a
 * LockError: catch the LockError, and read its cause for detail. Secrets are stripped.
 */
export declare class DriverError extends Error {
  readonly name: 'DriverError';
  /** 'redis', 'zookeeper', 'postgres', 'mysql', 'sqlite', or 'sql' when no database answered. */
  readonly driver: string;
  /**
   * The driver's own name for the error: a Redis error code ('WRONGPASS') or kind ('Io'), a
   * ZooKeeper error ('NoAuth'), a PostgreSQL SQLSTATE ('28P01'), a MySQL/MariaDB error number
   * ('1045'), a SQLite result code ('5').
   */
  readonly code: string;
  constructor(message: string, driver: string, code: string);
}

/** A wait cancelled by an AbortSignal (cancellation is not a LockError); `cause` is the signal's reason. */
export declare class AbortError extends Error {
  readonly name: 'AbortError';
  readonly code: 'ABORT_ERR';
}

export interface ConnectOptions extends FenceOptions {
  /**
   * Record the Locker's metrics into OpenTelemetry's JS API (`@opentelemetry/api`, which must be
   * installed), on the meter "fencelock" of the global provider: set the provider before
   * connecting. Default false.
   */
  metrics?: boolean;
}

/** Options of `Fence.open` (and, with `metrics`, of `connect`). */
export interface FenceOptions {
  /**
   * Make OpenTelemetry spans (`@opentelemetry/api`, which must be installed) with the tracer
   * "fencelock" of the global provider: `fencelock.acquire` (waiting included),
   * `fencelock.release`, `fencelock.extend`, `fencelock.fence.write`, each a child of the context
   * active where it was called, and `fencelock.renew`, root spans linked to their acquire's; with
   * the attributes `fencelock.backend`, `fencelock.lock`, `fencelock.mode`, `fencelock.outcome`,
   * `fencelock.token`. Default false.
   */
  tracing?: boolean;
  /** Base interval of the fallback poll while waiting, ms (default 50, jittered). */
  pollInterval?: number;
  /** How long one backend operation may take before it fails with UNAVAILABLE, ms (default 10000). */
  operationTimeout?: number;
  /** Receives fencelock's log records, process-wide (as `setLogger(logger, { level: logLevel })`). */
  logger?: ((record: LogRecord) => void) | null;
  /** The least severe level `logger` receives (default 'info'). */
  logLevel?: LogLevel;
}

export type LogLevel = 'error' | 'warn' | 'info' | 'debug';

/** One of fencelock's log records. */
export interface LogRecord {
  level: LogLevel;
  /** Names the lock when there is one; never contains credentials. */
  message: string;
  lock: string | null;
  timestamp: Date;
}

/**
 * Sends fencelock's log records at `level` ('info' by default) and above to `logger`,
 * process-wide, replacing the one set before; `null` stops. Exceptions `logger` throws are ignored.
 */
export declare function setLogger(
  logger: ((record: LogRecord) => void) | null,
  options?: { level?: LogLevel },
): void;

/**
 * How many log records the current logger dropped (the oldest, past 10,000 waiting) because the
 * event loop did not take them.
 */
export declare function droppedLogRecords(): number;

/** How many metric measurements were dropped in this process because too many waited (past 4,096). */
export declare function droppedMeasurements(): number;
/** How many spans were dropped in this process because too many waited for the event loop. */
export declare function droppedSpans(): number;

/** The lifecycle event names a Locker emits (and 'event' for all of them). */
export type LockEventKind =
  | 'acquired'
  | 'renewed'
  | 'renewalRetried'
  | 'suspended'
  | 'resumed'
  | 'lost'
  | 'released'
  | 'deploymentMismatch';

/** One thing that happened to one lease, in order for each lease. */
export interface LockEvent {
  kind: LockEventKind;
  name: string;
  /** The lease's fencing token. */
  token: bigint;
  /** 'sqlite', 'redis', 'redis-cluster', 'redlock', 'zookeeper', 'postgres', 'mysql'. */
  backend: string;
  timestamp: Date;
  /** Why (a loss, a renewal error), or null. */
  reason: string | null;
}

/** The held locks whose names start with a prefix, by name. */
export interface LockList {
  locks: LockInfo[];
  /** More than 1000 matched: only the first ones by name are here. */
  truncated: boolean;
}

export interface LockOptions {
  /** Lease length in ms on TTL backends (default 30000; at least 100). ZooKeeper's liveness is its session. */
  ttl?: number;
  /** Renew every ttl/3 while held (default true). */
  autoRenew?: boolean;
  /** Stop renewing after this many ms, so a stuck holder cannot keep the lock forever (default none). */
  maxHold?: number | null;
  /** Free text stored with the holder's description (host and pid are added). */
  holder?: string | null;
  /**
   * Re-entry in this execution scope (default false). Inside a withLock callback that (or an
   * enclosing one, across awaits) holds `name` through this Locker, true gives a nested lease at
   * once with the same token over the same server lease; without it such an acquire (or
   * tryAcquire) is DEADLOCK at once. Outside any withLock every call is its own scope.
   */
  reentrant?: boolean;
  /**
   * `release()` resolves once the release is sent, taking a round trip off the lock cycle; the
   * reply is still checked, and a lock found no longer ours then aborts `lease.signal`.
   */
  pipelinedRelease?: boolean;
}

export interface AcquireOptions extends LockOptions {
  /** How long acquire may wait, ms: absent or null waits forever, 0 tries once. TIMEOUT when it ends first. */
  wait?: number | null;
  /** Cancels the wait: acquire rejects with an AbortError and leaves nothing behind on the server. */
  signal?: AbortSignal | null;
}

/** Options of `semaphore` and `withSemaphore`: the number of permits, and acquire's options. */
export interface SemaphoreOptions extends AcquireOptions {
  /**
   * How many holders the semaphore admits at once, a whole number from 1 to 10,000. Every
   * participant must use the same number while the semaphore is held or waited on (another is
   * INVALID_ARGUMENT); once it is idle, a new number replaces the old.
   */
  permits: number;
}

/**
 * How a lease holds its name: 'exclusive' (a mutex's one holder), 'permit' (one of a
 * semaphore's), 'read' or 'write' (a read-write lock's). Only 'exclusive' and 'write' leases
 * may guard a Fence.
 */
export type LockMode = 'exclusive' | 'permit' | 'read' | 'write';

/** What a lock name is used as; one name is one kind at a time. */
export type LockKind = 'mutex' | 'semaphore' | 'read-write lock';

/** One holder of a semaphore or read-write lock, as `inspect` reads it. */
export interface LeaseInfo {
  mode: LockMode;
  token: bigint | null;
  holder: LockInfo['holder'];
  /** ms left on the server's clock (TTL backends); null on ZooKeeper. */
  timeLeft: number | null;
}

/** Who holds a lock, read without acquiring it. */
export interface LockInfo {
  name: string;
  /** What the name is used as ('mutex' for a name nobody uses). */
  kind: LockKind;
  /** Somebody holds it, in any mode. */
  held: boolean;
  /** The last token minted for this lock (a mutex holder's while held); null if never taken. */
  token: bigint | null;
  holder: {
    host?: string | null;
    pid?: number | null;
    language?: string | null;
    text?: string | null;
  } | null;
  /** A held mutex's ms left on the server's clock (TTL backends); see `leases` for the other kinds. */
  timeLeft: number | null;
  /** A semaphore's number of permits, as its holders and waiters use it; null for the other kinds. */
  permits: number | null;
  /** Every holder of a semaphore or read-write lock (empty for a mutex: see `holder`). */
  leases: LeaseInfo[];
  /**
   * The waiters queued behind the holders, first in line first: ZooKeeper's queue, and the
   * registered waiters of a semaphore or read-write lock on the other backends.
   */
  waiters: { node: string; holder: LockInfo['holder'] }[];
}

/** Proof of holding one lock. `await using lease = await locker.acquire(name)` releases at scope end. */
export declare class Lease implements AsyncDisposable {
  private constructor();
  readonly name: string;
  /** How the lease holds its name; only 'exclusive' and 'write' leases may guard a Fence. */
  readonly mode: LockMode;
  /** The fencing token: strictly increasing per lock name, below 2^63. */
  readonly token: bigint;
  /** The fencing token as a decimal string: for JSON, logs and databases without 64-bit integers. */
  readonly tokenString: string;
  /** When the server expires the lease unless renewed (this client's estimate); null on ZooKeeper. */
  readonly expiresAt: Date | null;
  /**
   * The client deadline, read now: after it this client counts the lease lost unless a renewal
   * succeeds first. Moves forward with renewals; earlier than expiresAt on TTL backends.
   */
  readonly validUntil: Date;
  /** Whether the lease is lost; computed from the client deadline on every read. */
  readonly isLost: boolean;
  /** Neither released nor lost. */
  readonly isHeld: boolean;
  /** Whether the last renewal failed (renewals are retried until the client deadline). */
  readonly renewalFailing: boolean;
  /**
   * Whether the lease's connection to its backend is down (ZooKeeper's "suspended") or its last
   * renewal failed: stop writing until it clears; the lease is lost at its deadline otherwise.
   */
  readonly isSuspended: boolean;
  /** Aborted, with a LOST LockError as its reason, when the lease is lost. Does not keep the process alive. */
  readonly signal: AbortSignal;
  /** Throws LOST after a loss (NOT_HELD after release). */
  throwIfLost(): void;
  /** What JSON.stringify shows: the name, the token as a decimal string, and the mode. */
  toJSON(): { name: string; token: string; mode: LockMode };
  /** Sets a new ttl (ms) from now; the current ttl when omitted. NOT_HELD after release, LOST after a loss. */
  extend(ttl?: number): Promise<void>;
  /** Releases the lock. NOT_HELD on a second release, LOST if the lease was lost first. */
  release(): Promise<void>;
  /** Releases; quiet after an explicit release, LOST after a loss. */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * The leases of several names held as one, from `locker.lockMany()` or `withLocks()`: all of
 * them or none, taken in one canonical order (by name, whatever order they were given in), so
 * callers taking overlapping sets cannot deadlock. Each part is an ordinary Lease of its name's
 * mutex, with its own token and renewal, so `part(name)` guards a Fence as a single lease does.
 * The whole is held while every part is and lost the moment any part is.
 * `await using locks = await locker.lockMany(names)` releases every part at scope end.
 */
export declare class MultiLease implements AsyncDisposable {
  private constructor();
  /** The names, in the canonical order they were acquired in (by name). A new array on each read. */
  readonly names: string[];
  /** Each name's fencing token, in the canonical order. A new Map on each read. */
  readonly tokens: Map<string, bigint>;
  /** The Lease of one name, to fence writes to what that name guards; undefined for a name not among them. */
  part(name: string): Lease | undefined;
  /** Every part is held: none released, none lost. */
  readonly isHeld: boolean;
  /** Some part is lost (computed from the client deadlines on every read): the work must stop. */
  readonly isLost: boolean;
  /**
   * Aborted, with a LOST LockError naming the part as its reason, the moment any part is lost.
   * Does not keep the process alive.
   */
  readonly signal: AbortSignal;
  /** Throws LOST after a loss of any part (NOT_HELD after release). */
  throwIfLost(): void;
  /** The earliest part's client deadline, read now: the whole is valid until then. */
  readonly validUntil: Date;
  /** The earliest part's server expiry (this client's estimate); null on ZooKeeper. */
  readonly expiresAt: Date | null;
  /**
   * Sets a new ttl (ms) from now on every part; each part's current ttl when omitted. Rejects with
   * the first part's error, after extending the others.
   */
  extend(ttl?: number): Promise<void>;
  /**
   * Releases every part, whatever happens to the others. LOST if any part was lost first (the
   * work may have run without that lock), else NOT_HELD if any part was already released.
   */
  release(): Promise<void>;
  /** Releases; quiet after an explicit release, LOST after a loss. */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * A client bound to one backend, made by connect(). Shared freely by concurrent tasks. An
 * EventEmitter of its leases' lifecycle: `locker.on('lost', (event) => ...)`, or `'event'` for
 * every kind; subscribed natively only while a listener is attached, and never keeps the process alive.
 */
export declare class Locker extends EventEmitter implements AsyncDisposable {
  private constructor();
  /** The URL, with any password redacted. */
  readonly url: string;
  readonly closed: boolean;
  /** Lifecycle events dropped (the oldest, past 10,000 waiting) since listeners were last attached. */
  readonly droppedEvents: number;
  /** Acquires `name`, waiting up to `wait` ms (forever by default). */
  acquire(name: string, options?: AcquireOptions): Promise<Lease>;
  /** Tries once: the Lease, or null when somebody else holds the lock. */
  tryAcquire(name: string, options?: LockOptions): Promise<Lease | null>;
  /** Runs `fn` while holding `name`; releases when it settles; rejects with LOST if the lease was lost meanwhile. */
  withLock<T>(name: string, fn: (lease: Lease) => T | Promise<T>): Promise<T>;
  withLock<T>(
    name: string,
    options: AcquireOptions,
    fn: (lease: Lease) => T | Promise<T>,
  ): Promise<T>;
  /**
   * Acquires the mutexes of every name in `names` (1 to 64 names, each once) as one MultiLease:
   * all of them or none, taken in one canonical order (by name), so callers taking overlapping
   * sets cannot deadlock. `wait` bounds the whole: TIMEOUT names the name that stayed busy, after
   * the ones already taken were released; `signal` cancels, leaving nothing behind. The other
   * options apply to every part. INVALID_ARGUMENT for no names, a name twice, more than 64 or a
   * bad name, before anything is taken.
   */
  lockMany(names: readonly string[], options?: AcquireOptions): Promise<MultiLease>;
  /**
   * Runs `fn` while holding every name in `names` (as lockMany()); releases them all when it
   * settles; rejects with LOST if a part was lost meanwhile (unless `fn` threw). Inside `fn` the
   * names are held by its scope, as in withLock().
   */
  withLocks<T>(names: readonly string[], fn: (locks: MultiLease) => T | Promise<T>): Promise<T>;
  withLocks<T>(
    names: readonly string[],
    options: AcquireOptions,
    fn: (locks: MultiLease) => T | Promise<T>,
  ): Promise<T>;
  /**
   * Acquires one of `options.permits` permits of the semaphore `name`, waiting as acquire()
   * does; each permit lease has its own token (mode 'permit'). INVALID_ARGUMENT on Redlock,
   * for permits outside 1 to 10,000, for another number than the semaphore's
   * holders and waiters use, or for a name in use as another kind.
   */
  semaphore(name: string, options: SemaphoreOptions): Promise<Lease>;
  /**
   * Acquires the read lock of the read-write lock `name` (mode 'read'): shared with other
   * readers while no writer holds it; once a writer waits, new readers queue behind it.
   */
  readLock(name: string, options?: AcquireOptions): Promise<Lease>;
  /**
   * Acquires the write lock of the read-write lock `name` (mode 'write'): alone, while no reader
   * holds it. Its token outranks every earlier read or write token, so it guards a Fence.
   */
  writeLock(name: string, options?: AcquireOptions): Promise<Lease>;
  /** Runs `fn` holding a permit of the semaphore `name`; releases when it settles (as withLock). */
  withSemaphore<T>(
    name: string,
    options: SemaphoreOptions,
    fn: (lease: Lease) => T | Promise<T>,
  ): Promise<T>;
  /** Runs `fn` holding the read lock of `name`; releases when it settles (as withLock). */
  withReadLock<T>(name: string, fn: (lease: Lease) => T | Promise<T>): Promise<T>;
  withReadLock<T>(
    name: string,
    options: AcquireOptions,
    fn: (lease: Lease) => T | Promise<T>,
  ): Promise<T>;
  /** Runs `fn` holding the write lock of `name`; releases when it settles (as withLock). */
  withWriteLock<T>(name: string, fn: (lease: Lease) => T | Promise<T>): Promise<T>;
  withWriteLock<T>(
    name: string,
    options: AcquireOptions,
    fn: (lease: Lease) => T | Promise<T>,
  ): Promise<T>;
  /** Campaigns for leadership of `name` (waits to win its lock); resolves to the Leadership. */
  campaign(name: string, options?: CampaignOptions): Promise<Leadership>;
  /** Runs `fn` while leading `name`; resigns when it settles; rejects with LOST if leadership was lost meanwhile. */
  withLeadership<T>(name: string, fn: (leadership: Leadership) => T | Promise<T>): Promise<T>;
  withLeadership<T>(
    name: string,
    options: CampaignOptions,
    fn: (leadership: Leadership) => T | Promise<T>,
  ): Promise<T>;
  /** Who leads `name` now and in which term, without campaigning; null when nobody does. */
  leader(name: string): Promise<Leader | null>;
  /** Who holds `name`, read without acquiring it. */
  inspect(name: string): Promise<LockInfo>;
  /** The locks held now whose names start with `prefix` (plain text; '' for all), read without acquiring. */
  list(prefix?: string): Promise<LockList>;
  /**
   * Frees `name` whoever holds it. DANGEROUS: the holder learns of it at its next renewal (on
   * ZooKeeper at once); until then two holders may run. Rejects with NOT_HELD when nobody held it.
   */
  forceRelease(name: string): Promise<void>;
  on(event: LockEventKind | 'event', listener: (event: LockEvent) => void): this;
  once(event: LockEventKind | 'event', listener: (event: LockEvent) => void): this;
  off(event: LockEventKind | 'event', listener: (event: LockEvent) => void): this;
  /** Releases every lease still held and closes the connections. Closing twice is harmless. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** Options of a campaign: the election lock's (ttl bounds how long a dead leader keeps the role). */
export interface CampaignOptions {
  /** Lease length in ms (default 30000). */
  ttl?: number;
  /** Renew every ttl/3 while leading (default true). */
  autoRenew?: boolean;
  /** Stop renewing after this many ms of leadership: the term then ends at its next deadline. */
  maxHold?: number | null;
  /** Free text stored with the leader's description; observers see it in leader(). */
  holder?: string | null;
  /** How long to campaign, ms: absent or null waits forever. TIMEOUT when it ends first. */
  wait?: number | null;
  /** Cancels the campaign: rejects with an AbortError and leaves nothing behind. */
  signal?: AbortSignal | null;
  /** `resign()` resolves once the release is sent; the reply is still checked (default false). */
  pipelinedRelease?: boolean;
}

/** Leadership of an election, won by locker.campaign(). `await using` resigns at scope end. */
export declare class Leadership implements AsyncDisposable {
  private constructor();
  /** The election's name. */
  readonly name: string;
  /** The term: the lease's fencing token, larger than every earlier term on the backend. */
  readonly term: bigint;
  /** Still leading: neither resigned nor lost. */
  readonly isLeader: boolean;
  /** Aborted, with a LOST LockError as its reason, the moment leadership is lost. */
  readonly signal: AbortSignal;
  /** The lease behind the leadership, to fence writes with. */
  readonly lease: Lease;
  /** Throws LOST after a loss (NOT_HELD after resign). */
  throwIfLost(): void;
  /** Steps down. NOT_HELD when already resigned, LOST if leadership was lost first. */
  resign(): Promise<void>;
  /** Resigns; quiet after an explicit resign, LOST after a loss. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** Who leads an election now, as an observer sees it. */
export interface Leader {
  term: bigint;
  holder: {
    host?: string | null;
    pid?: number | null;
    language?: string | null;
    text?: string | null;
  } | null;
}

/** One statement run inside a fence's transaction: `[sql, params]`, `{ sql, params }` or bare sql. */
export type SqlParam = null | undefined | number | bigint | boolean | string | Uint8Array;
export type SqlStatement =
  | string
  | [sql: string, params?: readonly SqlParam[]]
  | { sql: string; params?: readonly SqlParam[] };

/** A value `Fence.query` read: an integer is a number while exact (below 2^53), else a bigint. */
export type SqlResult = null | number | bigint | string | Buffer;

/** A lease, or a bare token (bigint) from another process. */
export type FenceToken = Lease | bigint;

/** The resource side: accepts a write only if its token is at least the highest accepted. */
export declare class Fence implements AsyncDisposable {
  private constructor();
  /** Opens the fence of `resource` at `url` (sqlite://, postgres://, mysql://, redis://); its table is made on first use. */
  static open(url: string, resource: string, options?: FenceOptions): Promise<Fence>;
  readonly resource: string;
  /** Runs `statements` in one transaction with the token check; rows changed per statement. STALE_TOKEN: nothing written. */
  fencedExecute(token: FenceToken, statements: readonly SqlStatement[]): Promise<number[]>;
  /** Sets `key` to `value` if the token is at least the highest accepted (Redis fences). */
  fencedSet(token: FenceToken, key: string, value: string | Uint8Array): Promise<void>;
  /**
   * Reads the fence's database read-only, outside any fenced write: for a SQLite fence, the way
   * to read it in this process (never node:sqlite: a second SQLite library). INVALID_ARGUMENT
   * for a statement that writes; nothing is written.
   */
  query(sql: string, params?: readonly SqlParam[]): Promise<SqlResult[][]>;
  /** Advisory only: a check followed by a separate write protects nothing. */
  check(token: FenceToken): Promise<void>;
  /** The highest token accepted so far, or null. */
  highest(): Promise<bigint | null>;
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** Connects to the backend the URL selects: redis://, redis+cluster://, redlock://, zk://, postgres://, mysql://, sqlite://. */
export declare function connect(url: string, options?: ConnectOptions): Promise<Locker>;

/** The version of the native module. */
export declare const version: string;
