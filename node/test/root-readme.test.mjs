// Runs the Node example of the repository's README.md (its ```js block), as users would copy it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { tempDir } from './helpers.mjs';

const pkg = fileURLToPath(new URL('..', import.meta.url));

test("the repository README's Node example runs", () => {
  const readme = readFileSync(join(pkg, '..', 'README.md'), 'utf8');
  const block = /```js\n([\s\S]*?)```/.exec(readme);
  assert.ok(block, 'README.md has a ```js example');
  const entry = pathToFileURL(join(pkg, 'index.mjs')).href;
  const code = block[1].replaceAll("from 'fencelock'", `from '${entry}'`);
  assert.notEqual(code, block[1], 'the example imports fencelock');
  const dir = tempDir();
  const file = join(dir, 'example.mjs');
  writeFileSync(file, code);
  const r = spawnSync(process.execPath, [file], {
    encoding: 'utf8',
    env: { ...process.env, FENCELOCK_URL: `sqlite://${join(dir, 'locks.db')}` },
    timeout: 120_000,
  });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /holding nightly-report with token \d+/);
});
