// The package's `fencelock` command: a shim that runs the compiled binary shipped in native/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { tempDir } from './helpers.mjs';

const pkg = fileURLToPath(new URL('..', import.meta.url));
const shim = join(pkg, JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8')).bin.fencelock);

function fencelockCommand(args, env = {}) {
  return spawnSync(process.execPath, [shim, ...args], {
    encoding: 'utf8',
    env: { ...process.env, ...env },
    timeout: 120_000,
  });
}

test('bin runs the packaged binary: --help', () => {
  const r = fencelockCommand(['--help']);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /Run a program while holding a distributed lock/);
});

test('bin passes arguments, the token and the exit code through', () => {
  const url = `sqlite://${join(tempDir(), 'locks.db')}`;
  const r = fencelockCommand([
    'run',
    '--url',
    url,
    'cli-job',
    '--',
    'sh',
    '-c',
    'echo "token=$FENCELOCK_TOKEN name=$FENCELOCK_NAME"; exit 7',
  ]);
  assert.equal(r.status, 7, r.stderr);
  assert.match(r.stdout, /^token=\d+ name=cli-job$/m);
  const status = fencelockCommand(['status', '--url', url, 'cli-job']);
  assert.equal(status.status, 0, status.stderr);
});

test('bin reports death by signal as the shell would', () => {
  const url = `sqlite://${join(tempDir(), 'locks.db')}`;
  const r = fencelockCommand([
    'run',
    '--url',
    url,
    'cli-signal',
    '--',
    'sh',
    '-c',
    'kill -TERM $$',
  ]);
  // The binary exits 128+15 for a command killed by SIGTERM (design §5).
  assert.equal(r.status, 143, r.stderr);
});
