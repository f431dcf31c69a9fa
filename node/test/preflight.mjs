// What the tests need before any of them runs, said once instead of as a failure of every test
// file: the dev dependencies, a native module built with the test hooks (test/hooks.mjs), and a
// FENCELOCK_TEST_BACKENDS naming only backends (test/helpers.mjs). `npm test` runs it first,
// node/run-tests.sh after its build. Only node/run-tests.sh builds the module the tests need: a
// plain `npm run build` leaves out the test hooks, as a release must.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const here = new URL('../', import.meta.url);

function stop(problem) {
  console.error(
    `fencelock's tests cannot run: ${problem}.\n` +
      'Run node/run-tests.sh instead: it installs the dev dependencies, builds the native module ' +
      'with the test hooks and runs the tests as CI does (CONTRIBUTING.md, "Running tests").',
  );
  process.exit(1);
}

const { devDependencies } = JSON.parse(readFileSync(new URL('package.json', here), 'utf8'));
const missing = Object.keys(devDependencies).filter(
  (name) => !existsSync(new URL(`node_modules/${name}/package.json`, here)),
);
if (missing.length > 0) stop(`the dev dependencies are not installed (${missing.join(', ')})`);

let native;
try {
  native = require('../lib/native.js');
} catch (e) {
  stop(`the native module does not load (${e.message.split('. ')[0]})`);
}
if (typeof native._testPanic !== 'function') {
  stop('the native module was built without the test hooks, which the tests use');
}

try {
  await import('./helpers.mjs');
} catch (e) {
  console.error(`fencelock's tests cannot run: ${e.message}`);
  process.exit(1);
}
