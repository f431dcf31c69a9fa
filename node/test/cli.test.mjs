// The package's `fencelock` command: a shim that runs the compiled binary shipped in native/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { sleep, tempDir } from './helpers.mjs';

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
  // The binary exits 128+15 for a command killed by SIGTERM (docs/design.md §9.2).
  assert.equal(r.status, 143, r.stderr);
});

/** Polls `predicate` until it holds, failing after `ms`. */
async function eventually(ms, predicate, what) {
  const started = Date.now();
  while (!predicate()) {
    if (Date.now() - started > ms) {
      const text = typeof what === 'function' ? what() : what;
      throw new Error(`${text} did not happen within ${ms} ms`);
    }
    await sleep(20);
  }
}

const readOr = (path, otherwise) => {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return otherwise;
  }
};

// An interactive bash on a pseudo-terminal (util-linux `script` makes one), so that Ctrl-C
// and Ctrl-Z reach the shim as they do when a user types them.
function terminal(env) {
  const shell = spawn('script', ['-qfec', 'bash --norc --noprofile -i', '/dev/null'], {
    env: { ...process.env, ...env, PS1: '$ ', TERM: 'dumb' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let output = '';
  shell.stdout.on('data', (chunk) => {
    output += chunk.toString();
  });
  shell.stderr.on('data', (chunk) => {
    output += chunk.toString();
  });
  return {
    send: (keys) => shell.stdin.write(keys),
    output: () => output,
    async expect(text, count = 1, within = 20_000) {
      const started = Date.now();
      while (output.split(text).length - 1 < count) {
        if (Date.now() - started > within) {
          throw new Error(
            `the terminal did not show ${JSON.stringify(text)} x${count}:\n${output}`,
          );
        }
        await sleep(20);
      }
    },
    close: () => shell.kill('SIGKILL'),
  };
}

test('bin in a terminal: Ctrl-C reaches CMD once, Ctrl-Z suspends the job and fg resumes it', async () => {
  const dir = tempDir();
  const log = join(dir, 'signals.log');
  const url = `sqlite://${join(dir, 'locks.db')}`;
  const term = terminal({});
  try {
    term.send("PS1='%% '\n");
    await term.expect('%% ');
    const script = join(dir, 'cmd.sh');
    const pidFile = join(dir, 'cmd.pid');
    writeFileSync(
      script,
      `trap 'echo INT >> ${log}' INT\necho $$ > ${pidFile}\necho "CMD is" running\nwhile :; do sleep 0.05; done\n`,
    );
    // bash, not sh: dash starts each `sleep` with vfork, and a Ctrl-Z that lands between the
    // vfork and the exec stops the child while dash waits for it uninterruptibly, so the job never
    // stops (with or without fencelock); bash forks, and stops with its child.
    term.send(`${process.execPath} ${shim} run --url ${url} --ttl 30s cli-tty -- bash ${script}\n`);
    await term.expect('CMD is running');
    const cmd = Number(readFileSync(pidFile, 'utf8'));
    // The terminal's foreground group (tpgid, in /proc/PID/stat) is CMD's: Ctrl-C goes there.
    const cmdHasTheTerminal = () =>
      Number(readOr(`/proc/${cmd}/stat`, '').split(') ')[1]?.split(' ')[5]) === cmd;
    await eventually(10_000, cmdHasTheTerminal, 'CMD getting the terminal');
    term.send('\x03');
    await eventually(
      10_000,
      () => readOr(log, '').includes('INT'),
      () => `CMD seeing Ctrl-C: ${term.output()}`,
    );
    await sleep(500);
    assert.equal(readFileSync(log, 'utf8'), 'INT\n', 'CMD got Ctrl-C exactly once');
    term.send('\x1a');
    await term.expect('Stopped');
    term.send('fg\n');
    await eventually(10_000, cmdHasTheTerminal, 'CMD getting the terminal back after fg');
    term.send('\x03');
    await eventually(
      10_000,
      () => readOr(log, '') === 'INT\nINT\n',
      () => `CMD seeing Ctrl-C after fg: ${readOr(log, '')}`,
    );
    // TERM ends CMD (bash's trap covers INT only), then the shim exits with CMD's code.
    term.send('\x1a');
    await term.expect('Stopped', 2);
    term.send('kill -TERM %1; fg; echo "exit=$?"\n');
    await term.expect('exit=143');
  } finally {
    term.close();
  }
});
