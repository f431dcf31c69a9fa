'use strict';
// The error classes and the one mapping of the native module's errors to them, apart from
// index.js so that the test-only entry (test/hooks.mjs) maps its errors as every call does.

/** Every error code, in documentation order (docs/design.md §6.1). Stable: never renamed. */
const ERROR_CODES = Object.freeze([
  'TIMEOUT',
  'LOST',
  'NOT_HELD',
  'UNAVAILABLE',
  'INVALID_ARGUMENT',
  'AUTH',
  'STALE_TOKEN',
  'BACKEND',
  'DEADLOCK',
  'CLOSED',
  'INTERNAL',
]);
const CODE_SET = new Set(ERROR_CODES);

/** A fencelock error: `code` is one of ERROR_CODES. */
class LockError extends Error {
  constructor(code, message, options) {
    super(message, options);
    this.name = 'LockError';
    this.code = code;
  }
}

/** A cancelled wait, as Node's own APIs report it: name AbortError, code ABORT_ERR. */
class AbortError extends Error {
  constructor(message = 'The operation was aborted', options) {
    super(message, options);
    this.name = 'AbortError';
    this.code = 'ABORT_ERR';
  }
}

/**
 * The error a driver reported (Redis, ZooKeeper, PostgreSQL, MySQL/MariaDB, SQLite), kept as the
 * `cause` of the LockError made from it. `driver` is 'redis', 'zookeeper', 'postgres', 'mysql',
 * 'sqlite', or 'sql' when no database answered; `code` is the driver's own name for the error
 * ('WRONGPASS', 'NoAuth', SQLSTATE '28P01', MySQL '1045', SQLite '5'). Secrets are stripped.
 */
class DriverError extends Error {
  constructor(message, driver, code) {
    super(message);
    this.name = 'DriverError';
    this.driver = driver;
    this.code = code;
  }
}

// src/error.rs hands the driver's error over as the native error's `cause`, its message a JSON
// object {driver, code, message}: the one structured channel napi offers for a cause.
function driverCause(err) {
  const carried = err.cause;
  if (carried === null || typeof carried !== 'object' || typeof carried.message !== 'string') {
    return undefined;
  }
  try {
    const { driver, code, message } = JSON.parse(carried.message);
    return new DriverError(message, driver, code);
  } catch {
    return undefined;
  }
}

// The native module's errors carry the core's code in their `code` property and the core's
// message as their message (src/error.rs); a cancelled wait has code ABORTED.
function fromNative(err) {
  if (err instanceof LockError || err instanceof AbortError) return err;
  const code = err !== null && typeof err === 'object' ? err.code : undefined;
  const message = err && typeof err.message === 'string' ? err.message : String(err);
  if (CODE_SET.has(code)) {
    const cause = driverCause(err);
    return new LockError(code, message, cause === undefined ? undefined : { cause });
  }
  if (code === 'ABORTED') return new AbortError();
  // Anything else is a bug in this layer (a value the native module could not convert).
  return new LockError('INTERNAL', `a bug in fencelock: unexpected native error: ${message}`, {
    cause: err,
  });
}

module.exports = { ERROR_CODES, LockError, AbortError, DriverError, fromNative };
