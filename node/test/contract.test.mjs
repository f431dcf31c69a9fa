// What every language must agree on, compared with the core's own lists (`fencelock::contract`):
// the error codes, the lifecycle event kinds, and the options each operation takes. The lists
// come from the native module at run time (test/hooks.mjs), never from a copy here, so a code,
// kind or option the core gains fails these tests until the Node package has it too. Each is
// checked in what the package does and in what index.d.ts declares.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import events from '../lib/events.js';
import { fencelock, fresh, tempDir } from './helpers.mjs';
import * as hooks from './hooks.mjs';

const { connect, Fence, LockError, ERROR_CODES } = fencelock;
const require = createRequire(import.meta.url);

const CONTRACT = hooks.contract();

/** The core's snake_case name as Node spells it: `max_hold` is `maxHold`. */
const camel = (name) => name.replace(/_([a-z])/g, (_, letter) => letter.toUpperCase());
const sorted = (names) => [...names].sort();

/** The Node functions of each core operation; each takes the options in one object. */
const FUNCTIONS = {
  connect: ['connect'],
  acquire: [
    'acquire',
    'withLock',
    'semaphore',
    'withSemaphore',
    'readLock',
    'withReadLock',
    'writeLock',
    'withWriteLock',
    // Several mutexes as one: the core's acquire_many takes acquire's options for every part.
    'lockMany',
    'withLocks',
  ],
  try_acquire: ['tryAcquire'],
  campaign: ['campaign', 'withLeadership'],
  open_fence: ['Fence.open'],
};

/** Options only Node offers: the operations that take them, why, and options that use each. */
const NODE_ONLY = {
  signal: {
    operations: ['acquire', 'campaign'],
    reason:
      "an AbortSignal cancels the wait, as in Node's own APIs (in Rust, dropping the future does); tryAcquire never waits",
    given: () => ({ signal: new AbortController().signal }),
  },
  logger: {
    operations: ['connect', 'open_fence'],
    reason: 'sets the process-wide logger (setLogger) as the connection opens',
    given: () => ({ logger: () => {} }),
  },
  logLevel: {
    operations: ['connect', 'open_fence'],
    reason: "the level of logger's records; it needs a logger",
    given: () => ({ logLevel: 'warn', logger: () => {} }),
  },
};

/**
 * Arguments of the core's that Node takes among a function's options, with a value each: the
 * core's `semaphore(name, permits)` is `semaphore(name, { permits, ...acquire's options })`.
 */
const ARGUMENTS_AS_OPTIONS = {
  semaphore: { permits: 2 },
  withSemaphore: { permits: 2 },
};

/** The option names Node offers for `operation`: the core's (not those a binding sets), and Node's own. */
function offered(operation) {
  const core = CONTRACT.options
    .filter((spec) => spec.operations.includes(operation) && !spec.setByBinding)
    .map((spec) => camel(spec.name));
  const own = Object.keys(NODE_ONLY).filter((name) =>
    NODE_ONLY[name].operations.includes(operation),
  );
  return new Set([...core, ...own]);
}

// ---- index.d.ts, read with the TypeScript compiler ----

const declarations = (() => {
  const ts = require('typescript');
  const file = fileURLToPath(new URL('../index.d.ts', import.meta.url));
  const program = ts.createProgram([file], { noEmit: true, types: [], skipLibCheck: true });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(file);
  const exported = new Map(
    checker.getExportsOfModule(checker.getSymbolAtLocation(source)).map((s) => [s.name, s]),
  );
  const typeOf = (symbol) => checker.getTypeOfSymbolAtLocation(symbol, source);
  const signaturesOf = (name) => {
    if (name === 'connect') return typeOf(exported.get('connect')).getCallSignatures();
    if (name === 'Fence.open')
      return typeOf(typeOf(exported.get('Fence')).getProperty('open')).getCallSignatures();
    const locker = checker.getDeclaredTypeOfSymbol(exported.get('Locker'));
    return typeOf(locker.getProperty(name)).getCallSignatures();
  };
  return {
    /** The members of an exported union of string literals. */
    union: (name) => checker.getDeclaredTypeOfSymbol(exported.get(name)).types.map((t) => t.value),
    /** The properties of the options parameter of each signature of `name` that has one. */
    options: (name) =>
      signaturesOf(name)
        .map((signature) => signature.parameters.find((p) => p.name === 'options'))
        .filter((parameter) => parameter !== undefined)
        .map((parameter) =>
          checker
            .getPropertiesOfType(checker.getNonNullableType(typeOf(parameter)))
            .map((p) => p.name),
        ),
  };
})();

// ---- the lists ----

test('the core hands over its lists, and each operation has its Node functions', () => {
  assert.equal(CONTRACT.errorCodes[0], 'TIMEOUT');
  assert.ok(CONTRACT.eventKinds.includes('renewal_retried'));
  assert.ok(CONTRACT.options.some((spec) => spec.name === 'max_hold'));
  assert.deepEqual(sorted(Object.keys(FUNCTIONS)), sorted(CONTRACT.operations));
  const coreNames = new Set(CONTRACT.options.map((spec) => camel(spec.name)));
  for (const [name, { operations }] of Object.entries(NODE_ONLY)) {
    assert.ok(!coreNames.has(name), `${name} is the core's option now: drop it from NODE_ONLY`);
    for (const operation of operations) assert.ok(operation in FUNCTIONS, operation);
  }
});

test('every core error code is a LockError code that Node throws, lists and declares', async () => {
  assert.deepEqual([...ERROR_CODES], CONTRACT.errorCodes);
  assert.deepEqual(declarations.union('ErrorCode'), CONTRACT.errorCodes);
  for (const code of CONTRACT.errorCodes) {
    await assert.rejects(
      async () => hooks.coreError(code, 'made by the contract test'),
      (e) => e instanceof LockError && e.name === 'LockError' && e.code === code,
      code,
    );
  }
});

test('every core event kind is emitted under its camelCase name, which index.d.ts declares', () => {
  const declared = declarations.union('LockEventKind');
  for (const kind of CONTRACT.eventKinds) {
    const name = events.EVENT_NAMES[kind];
    assert.equal(name, camel(kind), `a Locker emits ${kind} as ${name}: see lib/events.js`);
    assert.ok(events.LIFECYCLE_EVENTS.has(name), `a listener of ${name} does not subscribe`);
    assert.ok(declared.includes(name), `index.d.ts's LockEventKind lacks ${name}`);
  }
  assert.deepEqual(sorted(Object.keys(events.EVENT_NAMES)), sorted(CONTRACT.eventKinds));
  assert.deepEqual(sorted(declared), sorted(CONTRACT.eventKinds.map(camel)));
});

// ---- the options: declared, then taken when called ----

for (const [operation, functions] of Object.entries(FUNCTIONS)) {
  test(`index.d.ts declares the core's options of ${operation}, in camelCase`, () => {
    for (const name of functions) {
      const declared = declarations.options(name);
      assert.ok(declared.length > 0, `${name} declares no options`);
      const own = Object.keys(ARGUMENTS_AS_OPTIONS[name] ?? {});
      for (const names of declared)
        assert.deepEqual(sorted(names), sorted([...offered(operation), ...own]), name);
    }
  });
}

const SAMPLES = { duration: 5_000, flag: false, text: 'contract' };

let locker;
let lockerUrl;
let fenceUrl;

before(async () => {
  const dir = tempDir();
  lockerUrl = `sqlite://${join(dir, 'locks.db')}`;
  fenceUrl = `sqlite://${join(dir, 'data.db')}`;
  locker = await connect(lockerUrl);
});

after(async () => {
  fencelock.setLogger(null);
  await locker?.close();
});

/**
 * Calls the Node function `name` as a user would, with the options `passed` (and the core's
 * arguments it takes among them), and undoes what it did.
 */
async function call(name, passed) {
  const options = { ...ARGUMENTS_AS_OPTIONS[name], ...passed };
  switch (name) {
    case 'connect':
      return (await connect(lockerUrl, options)).close();
    case 'Fence.open':
      return (await Fence.open(fenceUrl, 'contract', options)).close();
    case 'acquire':
      return (await locker.acquire(fresh('contract'), options)).release();
    case 'withLock':
    case 'withSemaphore':
    case 'withReadLock':
    case 'withWriteLock':
      return locker[name](fresh('contract'), options, () => {});
    case 'semaphore':
    case 'readLock':
    case 'writeLock':
      return (await locker[name](fresh('contract'), options)).release();
    case 'lockMany':
      return (await locker.lockMany([fresh('contract'), fresh('contract')], options)).release();
    case 'withLocks':
      return locker.withLocks([fresh('contract'), fresh('contract')], options, () => {});
    case 'tryAcquire': {
      const lease = await locker.tryAcquire(fresh('contract'), options);
      assert.ok(lease !== null);
      return lease.release();
    }
    case 'campaign':
      return (await locker.campaign(fresh('contract'), options)).resign();
    case 'withLeadership':
      return locker.withLeadership(fresh('contract'), options, () => {});
    default:
      throw new Error(`no call for ${name}`);
  }
}

const EVERY_OPTION = [
  ...CONTRACT.options.filter((spec) => !spec.setByBinding).map((spec) => camel(spec.name)),
  ...Object.keys(NODE_ONLY),
];

function given(option) {
  if (option in NODE_ONLY) return NODE_ONLY[option].given();
  const spec = CONTRACT.options.find((s) => camel(s.name) === option);
  return { [option]: SAMPLES[spec.kind] };
}

for (const [operation, functions] of Object.entries(FUNCTIONS)) {
  test(`the functions of ${operation} take its options and refuse the core's others`, async () => {
    const takes = offered(operation);
    for (const name of functions) {
      for (const option of EVERY_OPTION) {
        if (takes.has(option)) {
          // A logger given here stays until after(): replacing one waits for its thread.
          try {
            await call(name, given(option));
          } catch (e) {
            assert.fail(`${name}({ ${option} }) failed: ${e?.code}: ${e?.message ?? e}`);
          }
        } else {
          await assert.rejects(
            call(name, { [option]: given(option)[option] }),
            (e) =>
              e instanceof LockError && e.code === 'INVALID_ARGUMENT' && e.message.includes(option),
            `${name} takes ${option}, which the core's ${operation} does not`,
          );
        }
      }
    }
  });
}
