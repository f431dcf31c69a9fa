// The test-only entry: the native module's test-hooks exports (src/test_hooks.rs), which exist
// only in a module built with the `test-hooks` feature (node/run-tests.sh and CI's build do).
// No user import reaches them: index.js does not export them, package.json's "exports" publishes
// only the package root, and test/ is not among its "files" (api.test.mjs checks all three).
import errors from '../lib/error.js';
import native from '../lib/native.js';

const { fromNative } = errors;

function hook(name) {
  const fn = native[name];
  if (typeof fn !== 'function') {
    throw new Error(`${name}: the native module was built without the test-hooks feature`);
  }
  return fn;
}

/** The names of the test-only exports the native module has. */
export const nativeHookNames = Object.keys(native).filter((name) => name.startsWith('_test'));

/** Panics inside Rust: throws what any panic throws (code INTERNAL). */
export function panic() {
  try {
    hook('_testPanic')();
  } catch (e) {
    throw fromNative(e);
  }
}

/** A Promise whose future panics on the native runtime. */
export async function panicAsync() {
  try {
    await hook('_testPanicAsync')();
  } catch (e) {
    throw fromNative(e);
  }
}

/** Emits `count` warn-level log records on this (the JS) thread. */
export function floodLogs(count) {
  hook('_testFloodLogs')(count);
}

/** Throws the core error `code` with `message`, mapped as every call's errors are. */
export function coreError(code, message) {
  try {
    hook('_testCoreError')(code, message);
  } catch (e) {
    throw fromNative(e);
  }
}

/** Rejects, from the native runtime, with the core error `code` and `message`. */
export async function coreErrorAsync(code, message) {
  try {
    await hook('_testCoreErrorAsync')(code, message);
  } catch (e) {
    throw fromNative(e);
  }
}

/** The raw error the native module throws for a core error, before index.js maps it. */
export function rawCoreError(code, message) {
  try {
    hook('_testCoreError')(code, message);
  } catch (e) {
    return e;
  }
  throw new Error('_testCoreError did not throw');
}

/** The raw rejection of the native module's Promise for a core error. */
export async function rawCoreErrorAsync(code, message) {
  try {
    await hook('_testCoreErrorAsync')(code, message);
  } catch (e) {
    return e;
  }
  throw new Error('_testCoreErrorAsync did not reject');
}

/**
 * The core's contract (`fencelock::contract`): `errorCodes`, `eventKinds`,
 * `operations`, and `options` ({ name, kind, default, operations, setByBinding }, names in
 * snake_case as the core spells them).
 */
export function contract() {
  return hook('_testContract')();
}
