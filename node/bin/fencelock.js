#!/usr/bin/env node
'use strict';
// The `fencelock` command of the npm package: runs the compiled binary (built from cli/ and
// copied into native/ by scripts/build.mjs, or shipped in the platform package; else the one
// on PATH) with this process's arguments and stdio, forwards INT, TERM, HUP, QUIT, USR1 and
// USR2 to it (Node's use of USR1 for its inspector is given up here),
// and exits as it exits. No locking logic here: the binary does all of it, including its own
// guardian process and signal handling.

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { commandCandidates, firstExisting, missingNativeAdvice } = require('../lib/platform.js');

function locate() {
  const packaged = firstExisting(commandCandidates());
  if (packaged !== null) return packaged;
  // Fall back to PATH, skipping this shim itself (npm links it as `fencelock` too).
  const name = process.platform === 'win32' ? 'fencelock.exe' : 'fencelock';
  const self = fs.realpathSync(__filename);
  for (const dir of (process.env.PATH || '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      if (fs.realpathSync(candidate) !== self) return candidate;
    } catch {
      // not there
    }
  }
  return null;
}

const binary = locate();
if (binary === null && process.platform !== 'linux') {
  process.stderr.write(
    'fencelock: the fencelock command runs on Linux only (its supervisor is written against Linux); on this system the package has the library without it\n',
  );
  process.exit(125);
}
if (binary === null) {
  process.stderr.write(
    'fencelock: the fencelock binary is not in this package (native/), in a platform package ' +
      `of this fencelock release nor on PATH. ${missingNativeAdvice()}\n`,
  );
  process.exit(125);
}

const child = spawn(binary, process.argv.slice(2), { stdio: 'inherit' });
const forwarded = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'];
const handlers = forwarded.map((sig) => {
  const handler = () => {
    try {
      child.kill(sig);
    } catch {
      // already gone
    }
  };
  process.on(sig, handler);
  return [sig, handler];
});

child.on('error', (err) => {
  process.stderr.write(`fencelock: cannot run ${binary}: ${err.message}\n`);
  process.exit(125);
});

child.on('exit', (code, signal) => {
  for (const [sig, handler] of handlers) process.removeListener(sig, handler);
  if (signal) {
    // Die of the same signal, so our parent sees what the binary's parent would have seen.
    process.kill(process.pid, signal);
    // A signal that does not kill by default: exit as a shell would report it.
    setTimeout(
      () => process.exit(128 + (require('node:os').constants.signals[signal] || 0)),
      100,
    ).unref();
    return;
  }
  process.exit(code ?? 125);
});
