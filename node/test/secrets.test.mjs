// No fragment of a URL's password appears in an error (tests/vectors/leaky-urls.json, shared
// with every language).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import { fencelock } from './helpers.mjs';

const { vectors } = JSON.parse(
  readFileSync(
    fileURLToPath(new URL('../../tests/vectors/leaky-urls.json', import.meta.url)),
    'utf8',
  ),
);

const fragments = (password) => password.split(/[^A-Za-z0-9]/).filter((f) => f.length >= 2);

test('the shared vectors are there', () => {
  assert.ok(vectors.length >= 12);
});

for (const { url, password } of vectors) {
  test(`no fragment of the password of ${url} appears in an error`, async () => {
    await assert.rejects(fencelock.connect(url, { operationTimeout: 3000 }), (e) => {
      assert.ok(e instanceof fencelock.LockError, String(e));
      const shown = `${e.message} ${e.stack} ${JSON.stringify(e)} ${e.cause?.stack} ${JSON.stringify(e.cause)}`;
      for (const fragment of fragments(password)) {
        assert.ok(!shown.includes(fragment), `${fragment} in ${shown}`);
      }
      return true;
    });
  });
}
