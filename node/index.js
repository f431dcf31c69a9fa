'use strict';
// fencelock for Node.js: distributed locks with fencing tokens.
//
// A thin layer over the native module (src/*.rs, which calls the Rust core): it checks the
// types of what callers pass, turns native errors into LockError / AbortError, wires an
// AbortSignal to the native cancel handle and the core's lost signal to `lease.signal`, and
// gives leases `Symbol.asyncDispose`. No locking logic lives here. Every network wait runs on
// the native module's tokio runtime, off the JS thread.

const { AsyncLocalStorage } = require('node:async_hooks');
const util = require('node:util');
const { EventEmitter } = require('node:events');
const native = require('./lib/native.js');
const { ERROR_CODES, LockError, AbortError, DriverError, fromNative } = require('./lib/error.js');
const { EVENT_NAMES, LIFECYCLE_EVENTS } = require('./lib/events.js');

const asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');

function invalid(message) {
  return new LockError('INVALID_ARGUMENT', message);
}

// An argument of the wrong type: a TypeError with Node's own code, as Node's APIs throw; a value
// of the right type out of range is a LockError INVALID_ARGUMENT.
function invalidType(message) {
  const error = new TypeError(message);
  error.code = 'ERR_INVALID_ARG_TYPE';
  return error;
}

function describe(value) {
  if (value === null) return 'null';
  if (typeof value === 'string') {
    const text = JSON.stringify(value);
    return `the string ${text.length > 40 ? `${text.slice(0, 37)}..."` : text}`;
  }
  if (typeof value === 'bigint') return `the bigint ${value}n`;
  if (typeof value === 'number' || typeof value === 'boolean')
    return `the ${typeof value} ${value}`;
  if (typeof value === 'function') return 'a function';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return `an object (${value.constructor?.name ?? 'Object'})`;
  return String(typeof value);
}

function checkString(value, what) {
  if (typeof value !== 'string')
    throw invalidType(`${what} must be a string, not ${describe(value)}`);
  // Node-API would turn a lone surrogate into U+FFFD, so "a\uD800" and "a\uDC00" would name
  // one lock: refuse it, as Python and the JVM do.
  if (!value.isWellFormed()) {
    throw invalid(`${what} is not valid Unicode text (it contains a lone surrogate)`);
  }
  return value;
}

// Numbers only; NaN, infinities, negatives and values above 2^53 are refused by the native
// module with messages that name the option (src/options.rs), and ranges by the core.
function checkMs(value, what) {
  if (typeof value !== 'number')
    throw invalidType(`${what} must be a number of milliseconds, not ${describe(value)}`);
  return value;
}

function checkBool(value, what) {
  if (typeof value !== 'boolean')
    throw invalidType(`${what} must be true or false, not ${describe(value)}`);
  return value;
}

function isAbortSignal(value) {
  return (
    value !== null &&
    typeof value === 'object' &&
    typeof value.aborted === 'boolean' &&
    typeof value.addEventListener === 'function' &&
    typeof value.removeEventListener === 'function'
  );
}

const TIMEOUT_MESSAGE =
  'fencelock takes no timeout option, because it means the lease length in some lock libraries and ' +
  'the time to wait in others: pass ttl (how long the lease lasts, ms) and/or wait (how long acquire may block, ms)';

function checkKeys(options, known, call) {
  if (options === undefined || options === null) return {};
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw invalidType(`${call}() options must be an object, not ${describe(options)}`);
  }
  for (const key of Object.keys(options)) {
    if (key === 'timeout') throw invalid(TIMEOUT_MESSAGE);
    if (!known.includes(key)) {
      throw invalid(
        `${call}() got an unknown option ${JSON.stringify(key)}; it takes ${known.join(', ')}`,
      );
    }
  }
  return options;
}

const ACQUIRE_OPTIONS = [
  'ttl',
  'wait',
  'signal',
  'autoRenew',
  'maxHold',
  'holder',
  'reentrant',
  'pipelinedRelease',
];
const TRY_ACQUIRE_OPTIONS = [
  'ttl',
  'autoRenew',
  'maxHold',
  'holder',
  'reentrant',
  'pipelinedRelease',
];
// A semaphore's permits come with its acquire options (the core's `semaphore(name, permits)`).
const SEMAPHORE_OPTIONS = ['permits', ...ACQUIRE_OPTIONS];
// The core's campaign options (every lock option but reentrant), and the AbortSignal.
const CAMPAIGN_OPTIONS = [
  'ttl',
  'wait',
  'signal',
  'autoRenew',
  'maxHold',
  'holder',
  'pipelinedRelease',
];
const CONNECT_OPTIONS = [
  'pollInterval',
  'operationTimeout',
  'logger',
  'logLevel',
  'metrics',
  'tracing',
];
// A fence takes no locks, so it has no metrics; its writes are spans.
const FENCE_OPTIONS = ['pollInterval', 'operationTimeout', 'logger', 'logLevel', 'tracing'];
const LOG_LEVELS = ['error', 'warn', 'info', 'debug'];

/** Lock options as the native module takes them, and the AbortSignal apart. */
function lockOptions(options, known, call) {
  const given = checkKeys(options, known, call);
  const out = {};
  if (given.ttl !== undefined) {
    if (given.ttl === null)
      throw invalidType('ttl must be a number of milliseconds, not null (the default is 30000)');
    out.ttl = checkMs(given.ttl, 'ttl');
  }
  // Absent or null: wait forever.
  if (given.wait !== undefined && given.wait !== null) out.wait = checkMs(given.wait, 'wait');
  if (given.autoRenew !== undefined) out.autoRenew = checkBool(given.autoRenew, 'autoRenew');
  if (given.maxHold !== undefined && given.maxHold !== null)
    out.maxHold = checkMs(given.maxHold, 'maxHold');
  if (given.holder !== undefined && given.holder !== null)
    out.holder = checkString(given.holder, 'holder');
  if (given.reentrant !== undefined) out.reentrant = checkBool(given.reentrant, 'reentrant');
  if (given.pipelinedRelease !== undefined)
    out.pipelinedRelease = checkBool(given.pipelinedRelease, 'pipelinedRelease');
  let signal;
  if (given.signal !== undefined && given.signal !== null) {
    if (!isAbortSignal(given.signal))
      throw invalidType(`signal must be an AbortSignal, not ${describe(given.signal)}`);
    signal = given.signal;
  }
  return { options: out, signal };
}

// How an acquisition holds its name, as the native acquire takes it (the core's LockMode,
// spelled as `lease.mode` is).
const EXCLUSIVE = Object.freeze({ mode: 'exclusive' });
const READ = Object.freeze({ mode: 'read' });
const WRITE = Object.freeze({ mode: 'write' });

/** A semaphore's lock options, the AbortSignal, and its mode with the permits (required). */
function semaphoreOptions(options, call) {
  if (typeof options === 'number') {
    throw invalidType(
      `${call}() takes the permits among its options: ${call}(name, { permits: ${options} })`,
    );
  }
  const { options: opts, signal } = lockOptions(options, SEMAPHORE_OPTIONS, call);
  const permits = options?.permits;
  if (permits === undefined || permits === null) {
    throw invalid(
      `${call}() needs permits: how many holders the semaphore admits at once, the same number in every participant`,
    );
  }
  // Whole numbers in range: the native module and the core check (src/options.rs).
  if (typeof permits !== 'number')
    throw invalidType(`permits must be a number, not ${describe(permits)}`);
  return { mode: { mode: 'permit', permits }, options: opts, signal };
}

/** The arguments of a with…() helper, `(name, fn)` or `(name, options, fn)`, checked. */
function scopedArgs(call, name, options, fn) {
  if (fn === undefined && typeof options === 'function') {
    fn = options;
    options = undefined;
  }
  checkString(name, 'lock name');
  if (typeof fn !== 'function')
    throw invalidType(
      `${call}() needs a function to run while holding the lock, not ${describe(fn)}`,
    );
  return { options, fn };
}

/**
 * The names of a multi-name lock: an array of lock names, each checked as a name is. How many,
 * which twice and which are bad is the core's check (INVALID_ARGUMENT, before anything is taken).
 */
function checkNames(names) {
  if (!Array.isArray(names)) {
    const hint = typeof names === 'string' ? ` (for one name: [${JSON.stringify(names)}])` : '';
    throw invalidType(`lock names must be an array of strings, not ${describe(names)}${hint}`);
  }
  return names.map((name, i) => checkString(name, `lock name ${i + 1}`));
}

function connectOptions(options, call, known) {
  const given = checkKeys(options, known, call);
  const out = {};
  if (given.pollInterval !== undefined && given.pollInterval !== null) {
    out.pollInterval = checkMs(given.pollInterval, 'pollInterval');
  }
  if (given.operationTimeout !== undefined && given.operationTimeout !== null) {
    out.operationTimeout = checkMs(given.operationTimeout, 'operationTimeout');
  }
  let logger;
  if (given.logger !== undefined && given.logger !== null) {
    if (typeof given.logger !== 'function')
      throw invalidType(`logger must be a function, not ${describe(given.logger)}`);
    logger = { fn: given.logger, level: checkLogLevel(given.logLevel) };
  } else if (given.logLevel !== undefined && given.logLevel !== null) {
    throw invalid('logLevel needs a logger');
  }
  const flag = (name) => {
    if (given[name] === undefined || given[name] === null) return false;
    if (typeof given[name] !== 'boolean')
      throw invalidType(`${name} must be true or false, not ${describe(given[name])}`);
    return given[name];
  };
  return { options: out, logger, metrics: flag('metrics'), tracing: flag('tracing') };
}

// The caller of each native call, while something wants it (a traced Locker or Fence, or a
// logger): OpenTelemetry's active context, the parent of the call's span, and an
// AsyncLocalStorage snapshot, which the logger is called in for the records the call produced.
// Kept by number: the native module carries the number with the operation (src/spans.rs) and
// gives it back with the span and the log records. Forgotten a while after the call settles
// (its records come back within milliseconds; one later than that is handled without it).
const callers = new Map();
const CALLER_KEPT_MS = 10_000;
let nextCaller = 1;
let tracingUsed = false;
let loggerSet = false;
let otelApi;

/**
 * Runs `call` (a native call returning a Promise) with the caller's context recorded for the
 * operation, when anything wants it; else just runs it (one check).
 */
function withCaller(call) {
  if (!tracingUsed && !loggerSet) return call();
  const number = nextCaller;
  nextCaller = nextCaller >= 0xffff_fff0 ? 1 : nextCaller + 1;
  callers.set(number, {
    otel: otelApi?.context.active(),
    run: AsyncLocalStorage.snapshot(),
  });
  native.setCaller(number);
  let pending;
  try {
    pending = call();
  } catch (e) {
    callers.delete(number);
    throw e;
  } finally {
    native.setCaller(0);
  }
  const forget = () => setTimeout(() => callers.delete(number), CALLER_KEPT_MS).unref();
  Promise.resolve(pending).then(forget, forget);
  return pending;
}

// How many acquires a tracing callback remembers, for renewals to link to (the oldest go first).
const REMEMBERED_ACQUIRES = 4096;

/**
 * A callback that makes the core's spans (src/spans.rs) through OpenTelemetry's JS API, with
 * the tracer "fencelock" of the global provider: the calls' spans children of the context active
 * where they were called, renewals root spans linked to their acquire's.
 */
function spanRecorder() {
  let api;
  try {
    api = require('@opentelemetry/api');
  } catch {
    throw invalid(
      "tracing: true makes spans through OpenTelemetry's JS API, which is not installed: npm install @opentelemetry/api (and an SDK with an exporter to see them)",
    );
  }
  otelApi = api;
  tracingUsed = true;
  const tracer = api.trace.getTracer('fencelock');
  const acquires = new Map();
  return (record) => {
    try {
      const parent = record.renewal
        ? api.ROOT_CONTEXT
        : (callers.get(record.caller)?.otel ?? api.ROOT_CONTEXT);
      const attributes = { ...record.attributes };
      if (record.token !== undefined && record.token !== null) {
        const token = Number(record.token);
        attributes['fencelock.token'] = Number.isSafeInteger(token) ? token : record.token;
      }
      const acquire = record.renewal ? acquires.get(record.lease) : undefined;
      const span = tracer.startSpan(
        record.name,
        {
          kind: api.SpanKind.CLIENT,
          attributes,
          links: acquire ? [{ context: acquire }] : [],
          startTime: record.start,
        },
        parent,
      );
      if (record.errorCode)
        span.setStatus({ code: api.SpanStatusCode.ERROR, message: record.errorCode });
      if (record.takesLease) {
        if (acquires.size >= REMEMBERED_ACQUIRES) acquires.delete(acquires.keys().next().value);
        acquires.set(record.lease, span.spanContext());
      } else if (record.endsLease) {
        acquires.delete(record.lease);
      }
      span.end(record.end);
    } catch {
      // A tracer that throws loses that one span, never the lock.
    }
  };
}

/**
 * A callback that records the core's measurements into OpenTelemetry's JS API, with the
 * instruments of the core's table from the meter "fencelock" of the global provider (set it
 * before connecting: the API has no proxy meter).
 */
function metricsRecorder() {
  let api;
  try {
    api = require('@opentelemetry/api');
  } catch {
    throw invalid(
      "metrics: true records into OpenTelemetry's JS API, which is not installed: npm install @opentelemetry/api (and an SDK with an exporter to see the metrics)",
    );
  }
  const meter = api.metrics.getMeter('fencelock');
  const instruments = new Map();
  for (const { name, kind, unit, description } of native.metricInstruments()) {
    const options = unit ? { unit, description } : { description };
    const instrument =
      kind === 'counter'
        ? meter.createCounter(name, options)
        : meter.createHistogram(name, options);
    instruments.set(name, { kind, instrument });
  }
  return (measurement) => {
    const found = instruments.get(measurement.instrument);
    if (!found) return;
    try {
      if (found.kind === 'counter') found.instrument.add(measurement.value, measurement.attributes);
      else found.instrument.record(measurement.value, measurement.attributes);
    } catch {
      // An instrument that throws loses that one measurement, never the lock.
    }
  };
}

function checkLogLevel(level) {
  if (level === undefined || level === null) return 'info';
  if (!LOG_LEVELS.includes(level))
    throw invalid(`logLevel must be one of ${LOG_LEVELS.join(', ')}, not ${describe(level)}`);
  return level;
}

/**
 * Sends fencelock's log records ({ level, message, lock, timestamp }) at `level` ('info' by
 * default) and above to `fn`, process-wide, replacing the logger set before; `null` stops.
 * `connect(url, { logger })` sets it too. Exceptions thrown by `fn` are ignored.
 */
function setLogger(fn, options) {
  if (fn === null || fn === undefined) {
    loggerSet = false;
    native.setLogger(null, undefined);
    return;
  }
  if (typeof fn !== 'function') throw invalidType(`logger must be a function, not ${describe(fn)}`);
  const given = checkKeys(options, ['level'], 'setLogger');
  const level = checkLogLevel(given.level);
  loggerSet = true;
  native.setLogger((record) => {
    const given = {
      level: record.level,
      message: record.message,
      lock: record.lock ?? null,
      timestamp: new Date(record.timestamp),
    };
    try {
      // In the AsyncLocalStorage of the call that produced it, when it came from one.
      const caller = record.caller ? callers.get(record.caller) : undefined;
      if (caller) caller.run(fn, given);
      else fn(given);
    } catch {
      // A logger that throws must not take the process down from a native callback.
    }
  }, level);
}

function abortError(signal) {
  return new AbortError('The operation was aborted', { cause: signal.reason });
}

// Constructors of Locker, Lease and Fence are not for users: connect(), acquire(), Fence.open().
const PRIVATE = Symbol('fencelock.private');
const leaseNatives = new WeakMap();

function lostMessage(name, reason) {
  return `lock ${JSON.stringify(name)} lost${reason ? ` (${reason})` : ''}`;
}

/** Proof of holding one lock. */
class Lease {
  #native;
  #name;
  #token;
  #mode;
  #controller = null;

  constructor(key, nativeLease) {
    if (key !== PRIVATE)
      throw new TypeError(
        'a Lease comes from locker.acquire(), tryAcquire(), semaphore(), readLock(), writeLock(), a with…() helper or a MultiLease',
      );
    this.#native = nativeLease;
    this.#name = nativeLease.name;
    this.#token = BigInt(nativeLease.token);
    this.#mode = nativeLease.mode;
    leaseNatives.set(this, nativeLease);
  }

  /** The lock's name. */
  get name() {
    return this.#name;
  }

  /**
   * How the lease holds its name: 'exclusive' (a mutex), 'permit' (a semaphore's), 'read' or
   * 'write'. Only 'exclusive' and 'write' leases may guard a Fence.
   */
  get mode() {
    return this.#mode;
  }

  /** The fencing token: strictly increasing per lock name, below 2^63. */
  get token() {
    return this.#token;
  }

  /** When the server expires the lease unless renewed (this client's estimate); null on ZooKeeper. */
  get expiresAt() {
    const ms = this.#native.expiresAt;
    return ms === null || ms === undefined ? null : new Date(ms);
  }

  /**
   * The client deadline, read now: after it this client counts the lease lost unless a renewal
   * succeeds first. Moves forward with renewals; earlier than expiresAt on TTL backends.
   */
  get validUntil() {
    return new Date(this.#native.validUntil);
  }

  /** The fencing token as a decimal string: for JSON, logs and databases without 64-bit integers. */
  get tokenString() {
    return this.#token.toString();
  }

  /** Whether the lease is lost; computed from the client deadline on every read. */
  get isLost() {
    return this.#native.isLost;
  }

  /** Whether the last renewal failed (renewals are retried until the client deadline). */
  get renewalFailing() {
    return this.#native.renewalFailing;
  }

  /**
   * Whether the lease's connection to its backend is down (ZooKeeper's "suspended") or its last
   * renewal failed: stop writing until it clears; the lease is lost at its deadline otherwise.
   */
  get isSuspended() {
    return this.#native.isSuspended;
  }

  /** Neither released nor lost. */
  get isHeld() {
    return this.#native.isHeld;
  }

  /** An AbortSignal aborted (with a LOST LockError as its reason) when the lease is lost. */
  get signal() {
    if (this.#controller === null) {
      const controller = new AbortController();
      this.#controller = controller;
      const name = this.#name;
      const abort = (reason, message) => {
        if (!controller.signal.aborted)
          controller.abort(new LockError('LOST', message ?? lostMessage(name, reason)));
      };
      // The core calls back from whichever thread notices the loss; the native module queues
      // the call onto this thread. It does not keep the process alive.
      this.#native.onLost(abort);
      if (this.#native.isLost) abort(this.#native.lostReason);
    }
    return this.#controller.signal;
  }

  /** Throws LOST if the lease was lost (NOT_HELD after release); call it between steps of long work. */
  throwIfLost() {
    try {
      this.#native.ensureHeld();
    } catch (e) {
      throw fromNative(e);
    }
  }

  /** Sets a new ttl (ms) from now, or renews for the current ttl when none is given. */
  async extend(ttl) {
    if (ttl !== undefined && ttl !== null) checkMs(ttl, 'ttl');
    try {
      await withCaller(() => this.#native.extend(ttl ?? undefined));
    } catch (e) {
      throw fromNative(e);
    }
  }

  /** Releases the lock. NOT_HELD on a second release; LOST if the lease was lost first. */
  async release() {
    try {
      await withCaller(() => this.#native.release());
    } catch (e) {
      throw fromNative(e);
    }
  }

  /** Leaving a scope: quiet after an explicit release, LOST after a loss. */
  async [asyncDispose]() {
    try {
      await this.release();
    } catch (e) {
      if (e instanceof LockError && e.code === 'NOT_HELD') return;
      throw e;
    }
  }

  /**
   * What JSON.stringify shows: the name, the token as a decimal string (JSON has no bigint) and
   * the mode, so logging a lease shows it and never throws.
   */
  toJSON() {
    return { name: this.#name, token: this.tokenString, mode: this.#mode };
  }

  [util.inspect.custom]() {
    const state = this.isLost ? 'lost' : this.isHeld ? 'held' : 'released';
    return `Lease { name: ${JSON.stringify(this.#name)}, token: ${this.#token}n, mode: ${this.#mode}, ${state} }`;
  }
}

/**
 * Leadership of an election, won by locker.campaign(): a view of the lease on its name, whose
 * token is the term. Resigning is releasing that lease.
 */
class Leadership {
  #lease;

  constructor(key, lease) {
    if (key !== PRIVATE) throw new TypeError('a Leadership comes from locker.campaign()');
    this.#lease = lease;
  }

  /** The election's name. */
  get name() {
    return this.#lease.name;
  }

  /** This leader's term: the lease's fencing token, larger than every earlier term. */
  get term() {
    return this.#lease.token;
  }

  /** Still the leader: neither resigned nor lost. */
  get isLeader() {
    return this.#lease.isHeld;
  }

  /** Aborted (with a LOST LockError as its reason) the moment leadership is lost. */
  get signal() {
    return this.#lease.signal;
  }

  /** The lease behind the leadership, to fence writes with (its token is the term). */
  get lease() {
    return this.#lease;
  }

  /** Throws LOST if leadership was lost (NOT_HELD after resign). */
  throwIfLost() {
    this.#lease.throwIfLost();
  }

  /** Steps down. NOT_HELD when already resigned; LOST if leadership was lost first. */
  async resign() {
    await this.#lease.release();
  }

  /** Leaving a scope resigns: quiet after an explicit resign, LOST after a loss. */
  async [asyncDispose]() {
    await this.#lease[asyncDispose]();
  }

  [util.inspect.custom]() {
    const state = this.isLeader ? 'leading' : this.#lease.isLost ? 'lost' : 'resigned';
    return `Leadership { name: ${JSON.stringify(this.name)}, term: ${this.term}n, ${state} }`;
  }
}

/**
 * The leases of several names held as one, by locker.lockMany() or withLocks(): all of them or
 * none, taken in one canonical order (by name), so overlapping sets cannot deadlock. Each part
 * is an ordinary Lease of its name's mutex, with its own token, so `part(name)` guards a Fence
 * as a single lease does; the whole is lost the moment any part is.
 */
class MultiLease {
  #native;
  #parts;
  #controller = null;

  constructor(key, nativeMulti) {
    if (key !== PRIVATE)
      throw new TypeError('a MultiLease comes from locker.lockMany() or locker.withLocks()');
    this.#native = nativeMulti;
    this.#parts = new Map(nativeMulti.parts().map((p) => [p.name, new Lease(PRIVATE, p)]));
  }

  /** The names, in the canonical order they were acquired in (by name). */
  get names() {
    return [...this.#parts.keys()];
  }

  /** Each name's fencing token (a bigint), in the canonical order. */
  get tokens() {
    return new Map([...this.#parts].map(([name, lease]) => [name, lease.token]));
  }

  /** The Lease of one name, to fence writes to what that name guards; undefined for another name. */
  part(name) {
    checkString(name, 'lock name');
    return this.#parts.get(name);
  }

  /** Every part is held: none released, none lost. */
  get isHeld() {
    return this.#native.isHeld;
  }

  /** Some part is lost: work guarded by the whole must stop. */
  get isLost() {
    return this.#native.isLost;
  }

  /** The earliest part's client deadline, read now: the whole is valid until then. */
  get validUntil() {
    return new Date(this.#native.validUntil);
  }

  /** The earliest part's server expiry (this client's estimate); null on ZooKeeper. */
  get expiresAt() {
    const ms = this.#native.expiresAt;
    return ms === null || ms === undefined ? null : new Date(ms);
  }

  /** An AbortSignal aborted (with a LOST LockError naming the part) when any part is lost. */
  get signal() {
    if (this.#controller === null) {
      const controller = new AbortController();
      this.#controller = controller;
      const abort = (reason, message) => {
        if (controller.signal.aborted) return;
        const lost = [...this.#parts.values()].find((p) => p.isLost);
        const text = message ?? (lost ? lostMessage(lost.name, reason) : 'a multi-name lock lost');
        controller.abort(new LockError('LOST', text));
      };
      this.#native.onLost(abort);
      if (this.#native.isLost) abort(this.#native.lostReason);
    }
    return this.#controller.signal;
  }

  /** Throws LOST if any part was lost (NOT_HELD after release); call it between steps of long work. */
  throwIfLost() {
    try {
      this.#native.ensureHeld();
    } catch (e) {
      throw fromNative(e);
    }
  }

  /** Sets a new ttl (ms) from now on every part, or renews each for its current ttl. */
  async extend(ttl) {
    if (ttl !== undefined && ttl !== null) checkMs(ttl, 'ttl');
    try {
      await withCaller(() => this.#native.extend(ttl ?? undefined));
    } catch (e) {
      throw fromNative(e);
    }
  }

  /**
   * Releases every part, whatever happens to the others. LOST if any part was lost first, else
   * NOT_HELD if any was already released.
   */
  async release() {
    try {
      await withCaller(() => this.#native.release());
    } catch (e) {
      throw fromNative(e);
    }
  }

  /** Leaving a scope: quiet after an explicit release, LOST after a loss. */
  async [asyncDispose]() {
    try {
      await this.release();
    } catch (e) {
      if (e instanceof LockError && e.code === 'NOT_HELD') return;
      throw e;
    }
  }

  [util.inspect.custom]() {
    const state = this.isLost ? 'lost' : this.isHeld ? 'held' : 'released';
    const tokens = [...this.tokens].map(([name, token]) => `${JSON.stringify(name)}: ${token}n`);
    return `MultiLease { ${tokens.join(', ')}, ${state} }`;
  }
}

// Execution scopes (docs/design.md §1.5) for re-entry: the core counts re-entries per (Locker,
// name, scope), and this layer only names the scope. A withLock callback runs in the scope that
// acquired its lock, an integer kept in AsyncLocalStorage, so acquire/tryAcquire/withLock called
// inside it (across awaits) belong to that scope; a call outside any withLock gets a scope of its
// own, so top-level calls contend as usual. Ids are never reused in the process.
const scopes = new AsyncLocalStorage();
let nextScope = 1;

function currentScope() {
  return scopes.getStore() ?? nextScope++;
}

/** A client bound to one backend; made by connect(). */
class Locker extends EventEmitter {
  #native;
  #events = null;

  constructor(key, nativeLocker) {
    if (key !== PRIVATE) throw new TypeError('a Locker comes from connect(url)');
    super();
    this.#native = nativeLocker;
    // Lifecycle events are subscribed to natively while somebody listens, and only then.
    this.on('newListener', (event) => {
      if (LIFECYCLE_EVENTS.has(event) && this.#events === null && !this.#native.closed) {
        this.#events = this.#native.subscribeEvents((e) => this.#deliver(e));
      }
    });
    this.on('removeListener', () => {
      if (this.#events !== null && ![...LIFECYCLE_EVENTS].some((e) => this.listenerCount(e) > 0)) {
        this.#events.close();
        this.#events = null;
      }
    });
  }

  #deliver(e) {
    const kind = EVENT_NAMES[e.kind] ?? e.kind;
    const event = {
      kind,
      name: e.name,
      token: BigInt(e.token),
      backend: e.backend,
      timestamp: new Date(e.timestamp),
      reason: e.reason ?? null,
    };
    this.emit(kind, event);
    this.emit('event', event);
  }

  /** The URL, with any password redacted. */
  get url() {
    return this.#native.url;
  }

  /** Whether close() was called. */
  get closed() {
    return this.#native.closed;
  }

  /**
   * How many lifecycle events were dropped (the oldest, past 10,000 waiting) because the event
   * loop did not take them, since listeners were last attached.
   */
  get droppedEvents() {
    return this.#events?.dropped ?? 0;
  }

  // Runs a native call that waits, with `signal` driving its cancel handle.
  async #cancellable(signal, call) {
    if (!signal) {
      try {
        return await call(undefined);
      } catch (e) {
        throw fromNative(e);
      }
    }
    if (signal.aborted) throw abortError(signal);
    const cancel = new native.CancelHandle();
    const onAbort = () => cancel.cancel();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      return await call(cancel);
    } catch (e) {
      const err = fromNative(e);
      throw err instanceof AbortError ? abortError(signal) : err;
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }

  // The one acquire path of every mode (the mutex, a permit, a read or a write lease).
  async #acquire(name, mode, options, signal, scope) {
    const nativeLease = await this.#cancellable(signal, (cancel) =>
      withCaller(() => this.#native.acquire(name, mode, options, scope, cancel)),
    );
    return new Lease(PRIVATE, nativeLease);
  }

  // Runs `fn(lease)` in the scope that acquired `name` in `mode`, and releases when it settles.
  async #withLease(name, mode, options, signal, fn) {
    const scope = currentScope();
    const lease = await this.#acquire(name, mode, options, signal, scope);
    let result;
    try {
      result = await scopes.run(scope, () => fn(lease));
    } catch (err) {
      await lease.release().catch(() => {});
      throw err;
    }
    await lease[asyncDispose]();
    return result;
  }

  // Takes every name in `names` as one MultiLease on behalf of `scope` (the core's
  // acquire_many_in), with `signal` cancelling the wait as for acquire.
  async #lockMany(names, options, signal, scope) {
    const nativeMulti = await this.#cancellable(signal, (cancel) =>
      withCaller(() => this.#native.acquireMany(names, options, scope, cancel)),
    );
    return new MultiLease(PRIVATE, nativeMulti);
  }

  /**
   * Acquires `name`, waiting up to `wait` ms (forever by default). Rejects with TIMEOUT when the
   * wait ends first, and with an AbortError when `signal` aborts (leaving nothing behind).
   * Inside a withLock callback that (or an enclosing one) holds `name`: with `reentrant` the
   * nested lease comes at once with the same token; without it, DEADLOCK.
   */
  async acquire(name, options) {
    checkString(name, 'lock name');
    const { options: opts, signal } = lockOptions(options, ACQUIRE_OPTIONS, 'acquire');
    return this.#acquire(name, EXCLUSIVE, opts, signal, currentScope());
  }

  /**
   * Acquires one of `permits` permits of the semaphore `name` (1 to 10,000; every participant
   * must use the same number while the semaphore is held or waited on), waiting as acquire()
   * does. Each permit lease has a token of its own; it cannot guard a Fence.
   */
  async semaphore(name, options) {
    checkString(name, 'lock name');
    const { mode, options: opts, signal } = semaphoreOptions(options, 'semaphore');
    return this.#acquire(name, mode, opts, signal, currentScope());
  }

  /**
   * Acquires the read lock of the read-write lock `name`, shared with other readers while no
   * writer holds it; once a writer waits, new readers queue behind it. Waits as acquire() does.
   * A read lease cannot guard a Fence.
   */
  async readLock(name, options) {
    checkString(name, 'lock name');
    const { options: opts, signal } = lockOptions(options, ACQUIRE_OPTIONS, 'readLock');
    return this.#acquire(name, READ, opts, signal, currentScope());
  }

  /**
   * Acquires the write lock of the read-write lock `name`: alone, while no reader holds it. Its
   * token is larger than every earlier read or write token, so it guards a Fence as a mutex's
   * does. Waits as acquire() does.
   */
  async writeLock(name, options) {
    checkString(name, 'lock name');
    const { options: opts, signal } = lockOptions(options, ACQUIRE_OPTIONS, 'writeLock');
    return this.#acquire(name, WRITE, opts, signal, currentScope());
  }

  /** Tries once: the Lease, or null when somebody else holds the lock. */
  async tryAcquire(name, options) {
    checkString(name, 'lock name');
    if (options && typeof options === 'object' && 'wait' in options) {
      throw invalid(
        'tryAcquire() tries once and takes no wait option; use acquire(name, { wait }) to wait',
      );
    }
    // As acquire: a name the caller's own scope holds is DEADLOCK without reentrant (the core's
    // rule, the same in every language), a nested lease with it.
    const { options: opts } = lockOptions(options, TRY_ACQUIRE_OPTIONS, 'tryAcquire');
    try {
      const scope = currentScope();
      const lease = await withCaller(() => this.#native.tryAcquire(name, opts, scope));
      return lease === null || lease === undefined ? null : new Lease(PRIVATE, lease);
    } catch (e) {
      throw fromNative(e);
    }
  }

  /**
   * Runs `fn(lease)` while holding `name`, and releases when it settles. If the lease was lost
   * meanwhile, rejects with LOST (unless `fn` itself threw: that error wins). Releasing inside
   * `fn` is allowed.
   */
  async withLock(name, options, fn) {
    ({ options, fn } = scopedArgs('withLock', name, options, fn));
    const { options: opts, signal } = lockOptions(options, ACQUIRE_OPTIONS, 'withLock');
    return this.#withLease(name, EXCLUSIVE, opts, signal, fn);
  }

  /**
   * Runs `fn(lease)` holding a permit of the semaphore `name` (`{ permits, ... }` as for
   * semaphore()), and releases it when `fn` settles, as withLock() does.
   */
  async withSemaphore(name, options, fn) {
    ({ options, fn } = scopedArgs('withSemaphore', name, options, fn));
    const { mode, options: opts, signal } = semaphoreOptions(options, 'withSemaphore');
    return this.#withLease(name, mode, opts, signal, fn);
  }

  /** Runs `fn(lease)` holding the read lock of `name`, and releases it when `fn` settles. */
  async withReadLock(name, options, fn) {
    ({ options, fn } = scopedArgs('withReadLock', name, options, fn));
    const { options: opts, signal } = lockOptions(options, ACQUIRE_OPTIONS, 'withReadLock');
    return this.#withLease(name, READ, opts, signal, fn);
  }

  /** Runs `fn(lease)` holding the write lock of `name`, and releases it when `fn` settles. */
  async withWriteLock(name, options, fn) {
    ({ options, fn } = scopedArgs('withWriteLock', name, options, fn));
    const { options: opts, signal } = lockOptions(options, ACQUIRE_OPTIONS, 'withWriteLock');
    return this.#withLease(name, WRITE, opts, signal, fn);
  }

  /**
   * Acquires the mutexes of every name in `names` (1 to 64 names, each once) as one MultiLease:
   * all of them, or none. They are taken one after another in one canonical order (by name,
   * whatever order they are given in), so callers taking overlapping sets cannot deadlock.
   * `wait` bounds the whole: TIMEOUT names the name that stayed busy, and the names already
   * taken are released; `signal` cancels as for acquire(), leaving nothing behind. The other
   * options apply to every part; re-entry is per name, as for acquire().
   */
  async lockMany(names, options) {
    const checked = checkNames(names);
    const { options: opts, signal } = lockOptions(options, ACQUIRE_OPTIONS, 'lockMany');
    return this.#lockMany(checked, opts, signal, currentScope());
  }

  /**
   * Runs `fn(multiLease)` while holding every name in `names` (as lockMany()), and releases them
   * all when it settles. If a part was lost meanwhile, rejects with LOST (unless `fn` itself
   * threw: that error wins). Inside `fn`, the names are held by its scope, as in withLock().
   */
  async withLocks(names, options, fn) {
    if (fn === undefined && typeof options === 'function') {
      fn = options;
      options = undefined;
    }
    const checked = checkNames(names);
    if (typeof fn !== 'function')
      throw invalidType(
        `withLocks() needs a function to run while holding the locks, not ${describe(fn)}`,
      );
    const { options: opts, signal } = lockOptions(options, ACQUIRE_OPTIONS, 'withLocks');
    const scope = currentScope();
    const multi = await this.#lockMany(checked, opts, signal, scope);
    let result;
    try {
      result = await scopes.run(scope, () => fn(multi));
    } catch (err) {
      await multi.release().catch(() => {});
      throw err;
    }
    await multi[asyncDispose]();
    return result;
  }

  /**
   * Campaigns for leadership of `name`: waits (up to `wait` ms, forever by default) to win its
   * lock, and resolves to the Leadership. Its term is the lease's fencing token; auto-renew keeps
   * it; it ends on resign(), on close(), or the moment the lease is lost (`signal` aborts).
   */
  async campaign(name, options) {
    checkString(name, 'election name');
    const { options: opts, signal } = lockOptions(options, CAMPAIGN_OPTIONS, 'campaign');
    const nativeLease = await this.#cancellable(signal, (cancel) =>
      withCaller(() => this.#native.campaign(name, opts, cancel)),
    );
    return new Leadership(PRIVATE, new Lease(PRIVATE, nativeLease));
  }

  /**
   * Runs `fn(leadership)` while leading `name` (after campaigning for it), and resigns when it
   * settles. If leadership was lost meanwhile, rejects with LOST (unless `fn` threw: that wins).
   */
  async withLeadership(name, options, fn) {
    if (fn === undefined && typeof options === 'function') {
      fn = options;
      options = undefined;
    }
    checkString(name, 'election name');
    if (typeof fn !== 'function')
      throw invalidType(
        `withLeadership() needs a function to run while leading, not ${describe(fn)}`,
      );
    const leadership = await this.campaign(name, options);
    let result;
    try {
      result = await fn(leadership);
    } catch (err) {
      await leadership.resign().catch(() => {});
      throw err;
    }
    await leadership[asyncDispose]();
    return result;
  }

  /** Who leads `name` now and in which term, without campaigning: `{ term, holder }` or null. */
  async leader(name) {
    checkString(name, 'election name');
    let leader;
    try {
      leader = await this.#native.leader(name);
    } catch (e) {
      throw fromNative(e);
    }
    if (leader === null || leader === undefined) return null;
    return { term: BigInt(leader.term), holder: leader.holder ?? null };
  }

  /** Who holds `name`, read without acquiring it. */
  async inspect(name) {
    checkString(name, 'lock name');
    let info;
    try {
      info = await this.#native.inspect(name);
    } catch (e) {
      throw fromNative(e);
    }
    return lockInfo(info);
  }

  /**
   * The locks held now whose names start with `prefix` (plain text, no wildcards; '' for all),
   * read without acquiring, sorted by name: at most 1000, `truncated` when more matched.
   */
  async list(prefix = '') {
    checkString(prefix, 'prefix');
    let listed;
    try {
      listed = await this.#native.list(prefix);
    } catch (e) {
      throw fromNative(e);
    }
    return { locks: listed.locks.map(lockInfo), truncated: listed.truncated };
  }

  /**
   * Frees `name` whoever holds it. DANGEROUS: for an operator clearing a dead or stuck holder.
   * The holder learns it lost the lock at its next renewal (on ZooKeeper at once); until then
   * two holders may run, and only fenced writes stay safe. Rejects with NOT_HELD when nobody held it.
   */
  async forceRelease(name) {
    checkString(name, 'lock name');
    try {
      await this.#native.forceRelease(name);
    } catch (e) {
      throw fromNative(e);
    }
  }

  /** Releases every lease still held and closes the connections. Closing twice is harmless. */
  async close() {
    try {
      await withCaller(() => this.#native.close());
    } catch (e) {
      throw fromNative(e);
    }
  }

  async [asyncDispose]() {
    await this.close();
  }

  [util.inspect.custom]() {
    return `Locker { url: ${JSON.stringify(this.url)}${this.closed ? ', closed' : ''} }`;
  }
}

/** Connects to the backend the URL selects (redis://, redlock://, zk://, postgres://, mysql://, sqlite://…). */
async function connect(url, options) {
  checkString(url, 'url');
  const {
    options: opts,
    logger,
    metrics,
    tracing,
  } = connectOptions(options, 'connect', CONNECT_OPTIONS);
  const recorder = metrics ? metricsRecorder() : undefined;
  const spans = tracing ? spanRecorder() : undefined;
  if (logger) setLogger(logger.fn, { level: logger.level });
  try {
    return new Locker(PRIVATE, await native.connect(url, opts, recorder, spans));
  } catch (e) {
    throw fromNative(e);
  }
}

// A token for a fence: a Lease (checked for loss before anything is sent) or a bigint.
function tokenArgs(token) {
  if (token instanceof Lease) return [leaseNatives.get(token), undefined];
  if (typeof token === 'bigint') {
    if (token < 0n || token >= 1n << 63n)
      throw invalid(`token must be between 0 and 2^63 - 1, got ${token}n`);
    return [undefined, token.toString()];
  }
  if (typeof token === 'number' && Number.isSafeInteger(token) && token >= 0)
    return [undefined, String(token)];
  if (typeof token === 'number') {
    throw invalidType(
      `token must be a Lease or a bigint; the number ${token} cannot be a token (tokens exceed 2^53: use bigint)`,
    );
  }
  throw invalidType(`token must be a Lease or a bigint, not ${describe(token)}`);
}

function sqlParam(value, at) {
  if (value === null || value === undefined) return { kind: 'null' };
  switch (typeof value) {
    case 'boolean':
      return { kind: 'int', text: value ? '1' : '0' };
    case 'bigint':
      return { kind: 'int', text: value.toString() };
    case 'number':
      if (!Number.isFinite(value)) throw invalid(`${at} must be a finite number, not ${value}`);
      if (Number.isInteger(value)) {
        if (!Number.isSafeInteger(value))
          throw invalid(`${at}: the integer ${value} is above 2^53; pass a bigint`);
        return { kind: 'int', text: String(value) };
      }
      return { kind: 'float', number: value };
    case 'string':
      return { kind: 'text', text: value };
    default:
      if (value instanceof Uint8Array)
        return {
          kind: 'bytes',
          bytes: Buffer.from(value.buffer, value.byteOffset, value.byteLength),
        };
      throw invalidType(
        `${at} is ${describe(value)}; parameters may be null, number, bigint, boolean, string or Buffer`,
      );
  }
}

// A value `query` read: an integer is a number while exact, else a bigint.
function sqlResult(value) {
  switch (value.kind) {
    case 'int': {
      const n = BigInt(value.text);
      return n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER)
        ? Number(n)
        : n;
    }
    case 'float':
      return value.number;
    case 'text':
      return value.text;
    case 'bytes':
      return value.bytes;
    default:
      return null;
  }
}

// [[sql, params], ...], [{ sql, params }, ...] or bare sql strings.
function sqlStatements(statements) {
  if (!Array.isArray(statements)) {
    throw invalidType(
      'statements must be an array of [sql, params] pairs, e.g. [["UPDATE t SET n = n + 1 WHERE id = ?", [7]]]',
    );
  }
  return statements.map((item, i) => {
    const n = i + 1;
    let sql;
    let params;
    if (typeof item === 'string') {
      sql = item;
    } else if (Array.isArray(item) && item.length >= 1 && item.length <= 2) {
      [sql, params] = item;
    } else if (item !== null && typeof item === 'object' && !Array.isArray(item)) {
      ({ sql, params } = item);
    } else {
      throw invalidType(
        `statement ${n} must be a [sql, params] pair, a { sql, params } object or an sql string`,
      );
    }
    checkString(sql, `the sql of statement ${n}`);
    if (params === undefined || params === null) params = [];
    if (!Array.isArray(params))
      throw invalidType(`the params of statement ${n} must be an array, not ${describe(params)}`);
    return {
      sql,
      params: params.map((p, j) => sqlParam(p, `parameter ${j + 1} of statement ${n}`)),
    };
  });
}

/**
 * The resource side: accepts a write only if its token is at least the highest it has
 * accepted for the resource. Opened on its own URL (sqlite://, postgres://, mysql://, redis://).
 */
class Fence {
  #native;

  constructor(key, nativeFence) {
    if (key !== PRIVATE) throw new TypeError('a Fence comes from Fence.open(url, resource)');
    this.#native = nativeFence;
  }

  static async open(url, resource, options) {
    checkString(url, 'url');
    checkString(resource, 'fence resource name');
    const { options: opts, logger, tracing } = connectOptions(options, 'Fence.open', FENCE_OPTIONS);
    const spans = tracing ? spanRecorder() : undefined;
    if (logger) setLogger(logger.fn, { level: logger.level });
    try {
      return new Fence(PRIVATE, await native.openFence(url, resource, opts, spans));
    } catch (e) {
      throw fromNative(e);
    }
  }

  get resource() {
    return this.#native.resource;
  }

  /**
   * Runs `statements` in one transaction with the token check; resolves to the rows each
   * statement changed. STALE_TOKEN (nothing written) when a newer token was accepted.
   */
  async fencedExecute(token, statements) {
    const [lease, bare] = tokenArgs(token);
    const stmts = sqlStatements(statements);
    try {
      return await withCaller(() => this.#native.fencedExecute(lease, bare, stmts));
    } catch (e) {
      throw fromNative(e);
    }
  }

  /** Sets `key` to `value` (string or bytes) if the token is at least the highest accepted (Redis fences). */
  async fencedSet(token, key, value) {
    const [lease, bare] = tokenArgs(token);
    checkString(key, 'key');
    let bytes;
    if (typeof value === 'string') bytes = Buffer.from(value, 'utf8');
    else if (value instanceof Uint8Array)
      bytes = Buffer.from(value.buffer, value.byteOffset, value.byteLength);
    else throw invalidType(`value must be a string or a Buffer, not ${describe(value)}`);
    try {
      await withCaller(() => this.#native.fencedSet(lease, bare, key, bytes));
    } catch (e) {
      throw fromNative(e);
    }
  }

  /**
   * Reads the fence's database: runs `sql` with `params` read-only, outside any fenced write;
   * resolves to its rows, each an array of null, number (a bigint past 2^53), string or Buffer.
   * For a SQLite fence, read your data this way, never with node:sqlite or another SQLite
   * module in the same process (docs/sqlite.md). INVALID_ARGUMENT for a statement that writes
   * (nothing is written): write with fencedExecute.
   */
  async query(sql, params) {
    checkString(sql, 'the sql of the query');
    if (params === undefined || params === null) params = [];
    if (!Array.isArray(params))
      throw invalidType(`the params of a query must be an array, not ${describe(params)}`);
    const given = params.map((p, j) => sqlParam(p, `parameter ${j + 1} of the query`));
    let rows;
    try {
      rows = await withCaller(() => this.#native.query(sql, given));
    } catch (e) {
      throw fromNative(e);
    }
    return rows.map((row) => row.map(sqlResult));
  }

  /** Advisory only: a check followed by a separate write protects nothing. */
  async check(token) {
    const [lease, bare] = tokenArgs(token);
    try {
      await this.#native.check(lease, bare);
    } catch (e) {
      throw fromNative(e);
    }
  }

  /** The highest token accepted so far, or null. */
  async highest() {
    try {
      const t = await this.#native.highest();
      return t === null || t === undefined ? null : BigInt(t);
    } catch (e) {
      throw fromNative(e);
    }
  }

  async close() {
    try {
      await this.#native.close();
    } catch (e) {
      throw fromNative(e);
    }
  }

  async [asyncDispose]() {
    await this.close();
  }
}

/** Benchmark-only: one round trip to the native runtime that does nothing. */
function _ping() {
  return native._ping();
}

function bigintOrNull(token) {
  return token === null || token === undefined ? null : BigInt(token);
}

function lockInfo(info) {
  return {
    name: info.name,
    kind: info.kind,
    held: info.held,
    token: bigintOrNull(info.token),
    holder: info.holder ?? null,
    timeLeft: info.timeLeft ?? null,
    permits: info.permits ?? null,
    leases: info.leases.map((l) => ({
      mode: l.mode,
      token: bigintOrNull(l.token),
      holder: l.holder ?? null,
      timeLeft: l.timeLeft ?? null,
    })),
    waiters: (info.waiters ?? []).map((w) => ({ node: w.node, holder: w.holder ?? null })),
  };
}

/**
 * How many log records the current logger dropped (the oldest, past 10,000 waiting) because the
 * event loop did not take them.
 */
function droppedLogRecords() {
  return native.droppedLogRecords();
}

/**
 * How many metric measurements were dropped, in this process, because too many waited for the
 * event loop (past 4,096).
 */
function droppedMeasurements() {
  return native.droppedMeasurements();
}

/**
 * How many spans were dropped, in this process, because too many waited for the event loop
 * (past 4,096).
 */
function droppedSpans() {
  return native.droppedSpans();
}

module.exports = {
  connect,
  setLogger,
  droppedLogRecords,
  droppedMeasurements,
  droppedSpans,
  Locker,
  Lease,
  MultiLease,
  Leadership,
  Fence,
  LockError,
  AbortError,
  DriverError,
  ERROR_CODES,
  version: native.version(),
  _ping,
};
