// Runs the examples of node/README.md, and the one Node example of the repository's README.md,
// as users would copy them: each in a Node of its own, in an empty folder.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { tempDir } from './helpers.mjs';

const pkg = fileURLToPath(new URL('..', import.meta.url));

function jsBlocks(path) {
  return [...readFileSync(path, 'utf8').matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
}

const blocks = jsBlocks(join(pkg, 'README.md'));

function runBlock(block) {
  const entry = pathToFileURL(join(pkg, 'index.mjs')).href;
  const code = block.replaceAll("from 'fencelock'", `from '${entry}'`);
  assert.notEqual(code, block, 'the example imports fencelock');
  const dir = tempDir();
  const file = join(dir, 'example.mjs');
  writeFileSync(file, code);
  const r = spawnSync(process.execPath, [file], {
    cwd: dir,
    encoding: 'utf8',
    env: { ...process.env, FENCELOCK_URL: `sqlite://${join(dir, 'locks.db')}` },
    timeout: 120_000,
  });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
}

test('the README example runs', () => {
  assert.ok(blocks.length >= 1, 'README.md has a ```js example');
  assert.match(runBlock(blocks[0]), /holding nightly-report with token \d+/);
});

test("the repository README's one Node example runs", () => {
  const found = jsBlocks(join(pkg, '..', 'README.md'));
  assert.equal(found.length, 1, 'the repository README has one ```js example');
  assert.match(runBlock(found[0]), /^holding nightly-report with token \d+\n$/);
});

test('the README example of semaphores and read-write locks runs', () => {
  const block = blocks.find((b) => b.includes('semaphore('));
  assert.ok(block, 'README.md has an example of semaphores and read-write locks');
  assert.match(
    runBlock(block),
    /^semaphore of 2: 1 held\nreading with a read lease\nwriting with a write lease, token \d+\n$/,
  );
});

test('the README example of the with… forms of semaphores and read-write locks runs', () => {
  const block = blocks.find((b) => b.includes('withSemaphore('));
  assert.ok(block, 'README.md has an example of withSemaphore, withReadLock and withWriteLock');
  assert.match(runBlock(block), /^permit \d+ of 3\nread \d+\nwrite \d+\n$/);
});

test('the README example of several names as one lock runs', () => {
  const block = blocks.find((b) => b.includes('withLocks('));
  assert.ok(block, 'README.md has an example of several names as one lock');
  assert.match(
    runBlock(block),
    /^holding account-3 with token \d+\nholding account-7 with token \d+\n$/,
  );
});

test('the README re-entry example runs', () => {
  const block = blocks.find((b) => b.includes('reentrant: true'));
  assert.ok(block, 'README.md has a re-entry example');
  assert.match(runBlock(block), /re-entered with the same token: true/);
});

test('the README election example runs', () => {
  const block = blocks.find((b) => b.includes('campaign('));
  assert.ok(block, 'README.md has an election example');
  const out = runBlock(block);
  assert.match(
    out,
    /leading in term \d+\nobservers see term \d+ held by worker-1\nafter resigning: null/,
  );
});
