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

// The native module's errors carry the core's code in their `code` property and the core's
// message as their message (src/error.rs); a cancelled wait has code ABORTED.
function fromNative(err) {
  if (err instanceof LockError || err instanceof AbortError) return err;
  const code = err !== null && typeof err === 'object' ? err.code : undefined;
  const message = err && typeof err.message === 'string' ? err.message : String(err);
  if (CODE_SET.has(code)) return new LockError(code, message);
  if (code === 'ABORTED') return new AbortError();
  // Anything else is a bug in this layer (a value the native module could not convert).
  return new LockError('INTERNAL', `a bug in fencelock: unexpected native error: ${message}`, {
    cause: err,
  });
}

module.exports = { ERROR_CODES, LockError, AbortError, fromNative };
