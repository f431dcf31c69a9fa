#!/usr/bin/env node
// Builds the native module and the `fencelock` command with cargo, and copies both into this
// package: fencelock.<platform>-<arch>[-gnu].node next to package.json (the name napi-rs uses)
// and native/fencelock (what `bin/fencelock.js` runs). `npm install ./node`, `npm run build`
// and node/run-tests.sh all come here, and so does the install of a released package on a
// platform without a prebuilt one (--if-missing).
//
//   node scripts/build.mjs [--profile release|dev] [--test-hooks] [--if-missing]
//
// --test-hooks builds the native module with the test-only `test-hooks` feature (exports that
// panic on purpose, for the tests); node/run-tests.sh passes it, an install never does.
// --if-missing (the released package's install script) does nothing when this platform's
// prebuilt package is installed, and otherwise builds from the Rust sources the package ships
// in source/ (release/source_tree.py), then deletes what cargo left there.
//
// cargo builds with --locked: exactly the dependency versions of the shipped Cargo.lock, which
// are those the project tested (release/source_tree.py prunes it to source/'s crates and changes
// no version), never versions resolved against crates.io at install time. npm shows nothing of
// a dependency's install script unless it fails (or runs with --foreground-scripts): there
// cargo's output is kept, and a failure prints its last lines and where the whole log is.
//
// Environment: FENCELOCK_PROFILE (default release; run-tests.sh uses dev), CARGO (default
// cargo), CARGO_TARGET_DIR (default: the workspace's target/), FENCELOCK_SKIP_BUILD=1 (use
// files already in place). Plain cargo instead of `napi build`: it builds into the workspace's
// target folder for the host, so the dependency tree already compiled by `cargo test` is reused
// (`napi build --platform` builds for an explicit target triple into a folder of its own).
import { spawn } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(dirname(fileURLToPath(import.meta.url)));
const {
  nativeModuleCandidates,
  commandCandidates,
  firstExisting,
  platformKeys,
  platformPackages,
  publishedPlatformPackage,
} = createRequire(import.meta.url)('../lib/platform.js');

const args = process.argv.slice(2);
const at = args.indexOf('--profile');
const profile = at >= 0 ? args[at + 1] : process.env.FENCELOCK_PROFILE || 'release';
const testHooks = args.includes('--test-hooks');
const ifMissing = args.includes('--if-missing');
const moduleFile = join(here, `fencelock.${platformKeys()[0]}.node`);
const cliFile = join(here, 'native', process.platform === 'win32' ? 'fencelock.exe' : 'fencelock');

if (process.env.FENCELOCK_SKIP_BUILD === '1') {
  console.log('fencelock: FENCELOCK_SKIP_BUILD=1, using the files in place');
  process.exit(0);
}
if (
  ifMissing &&
  firstExisting(nativeModuleCandidates()) !== null &&
  (process.platform !== 'linux' || firstExisting(commandCandidates()) !== null)
) {
  process.exit(0); // the prebuilt platform package is installed
}
// The workspace to build: the repository around this package (a source checkout), or the
// sources a released package ships.
const checkout = dirname(here);
const shipped = join(here, 'source');
const root =
  existsSync(join(checkout, 'Cargo.toml')) && existsSync(join(here, 'Cargo.toml'))
    ? checkout
    : shipped;
if (!existsSync(join(root, 'Cargo.toml'))) {
  if (existsSync(moduleFile)) process.exit(0); // a package with its native module built in
  console.error('fencelock: no prebuilt native module and no Rust sources to build it from');
  process.exit(1);
}
if (root === shipped) {
  // Only a package fencelock publishes is named (lib/platform.js): any other name may be anyone's.
  const published = publishedPlatformPackage();
  const why =
    published === null
      ? `fencelock has no prebuilt native module for ${platformKeys()[0]}`
      : `the platform package ${published} is not installed`;
  for (const reason of platformPackages().skipped)
    console.error(`fencelock: not loaded: ${reason}`);
  console.error(
    `fencelock: ${why}; building the native module from source with cargo, which needs Rust ` +
      'and takes a few minutes (README, "Install")',
  );
}
// A build inside the installed package cleans up after itself: cargo's folder is gigabytes.
const ownTarget = root === shipped && !process.env.CARGO_TARGET_DIR;

const cargo = process.env.CARGO || 'cargo';
// The command's supervisor is Linux-only (cli/src/main.rs): elsewhere the module is built alone.
const withCommand = process.platform === 'linux';
const cargoArgs = [
  'build',
  '--locked',
  '-p',
  'fencelock-node',
  ...(withCommand ? ['-p', 'fencelock-cli'] : []),
  '--profile',
  profile,
  '--message-format=json-render-diagnostics',
  ...(testHooks ? ['--features', 'fencelock-node/test-hooks'] : []),
];
console.error(`fencelock: ${cargo} ${cargoArgs.join(' ')}`);
// npm runs a dependency's install script with its output piped and shows it only if the script
// fails; a terminal, --foreground-scripts (npm_config_foreground_scripts) or any other way of
// running this script has someone watching, who gets cargo's output as it comes.
const installEvents = ['preinstall', 'install', 'postinstall'];
const watched =
  process.stderr.isTTY ||
  process.env.npm_config_foreground_scripts === 'true' ||
  !installEvents.includes(process.env.npm_lifecycle_event ?? '');
const TAIL_LINES = 40;
const started = Date.now();
const run = await runCargo();
if (run.error) {
  console.error(
    `fencelock: cannot run ${cargo} (${run.error.message}): no prebuilt native module fits ` +
      'this platform, and building one needs Rust (https://rustup.rs); install it and run ' +
      'npm install again',
  );
  process.exit(1);
}
if (run.status !== 0) {
  // npm prints a failed script's output: its last lines are cargo's error, not the whole build.
  const logDir = mkdtempSync(join(tmpdir(), 'fencelock-build-'));
  const log = join(logDir, 'cargo.log');
  writeFileSync(log, run.stderr);
  console.error(`fencelock: cargo build failed (exit ${run.status ?? run.signal})`);
  if (!watched) {
    console.error("fencelock: the end of cargo's output:");
    console.error(run.stderr.trimEnd().split('\n').slice(-TAIL_LINES).join('\n'));
  }
  console.error(`fencelock: the whole log: ${log}`);
  process.exit(run.status || 1);
}

/** Runs cargo; its JSON messages (stdout) and its log (stderr) are kept, the log shown if watched. */
function runCargo() {
  return new Promise((resolve) => {
    const child = spawn(cargo, cargoArgs, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    const stdout = [];
    const stderr = [];
    child.stdout.on('data', (chunk) => stdout.push(chunk));
    child.stderr.on('data', (chunk) => {
      stderr.push(chunk);
      if (watched) process.stderr.write(chunk);
    });
    child.on('error', (error) => resolve({ error }));
    child.on('close', (status, signal) =>
      resolve({
        status,
        signal,
        stdout: Buffer.concat(stdout).toString('utf8'),
        stderr: Buffer.concat(stderr).toString('utf8'),
      }),
    );
  });
}

let library;
let executable;
for (const line of run.stdout.split('\n')) {
  if (!line.startsWith('{')) continue;
  const msg = JSON.parse(line);
  if (msg.reason !== 'compiler-artifact') continue;
  if (msg.target.name === 'fencelock_node' && msg.target.kind.includes('cdylib')) {
    library = msg.filenames.find((f) => /\.(so|dylib|dll)$/.test(f));
  }
  if (msg.target.name === 'fencelock' && msg.target.kind.includes('bin'))
    executable = msg.executable;
}
if (!library || (withCommand && !executable)) {
  console.error('fencelock: cargo did not report the native module and the fencelock binary');
  process.exit(1);
}

// Copy, then rename into place: a running process keeps the old file it mapped.
function install(from, to, mode) {
  mkdirSync(dirname(to), { recursive: true });
  const tmp = `${to}.tmp-${process.pid}`;
  copyFileSync(from, tmp);
  chmodSync(tmp, mode);
  renameSync(tmp, to);
}
install(library, moduleFile, 0o755);
if (withCommand) install(executable, cliFile, 0o755);
if (ownTarget) rmSync(join(root, 'target'), { recursive: true, force: true });
console.error(
  `fencelock: built (${profile}) in ${Math.round((Date.now() - started) / 1000)}s: ${moduleFile}, ${cliFile}`,
);
