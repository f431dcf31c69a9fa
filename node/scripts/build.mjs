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
// Environment: FENCELOCK_PROFILE (default release; run-tests.sh uses dev), CARGO (default
// cargo), CARGO_TARGET_DIR (default: the workspace's target/), FENCELOCK_SKIP_BUILD=1 (use
// files already in place). Plain cargo instead of `napi build`: it builds into the workspace's
// target folder for the host, so the dependency tree already compiled by `cargo test` is reused
// (`napi build --platform` builds for an explicit target triple into a folder of its own).
import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(dirname(fileURLToPath(import.meta.url)));
const { nativeModuleCandidates, commandCandidates, firstExisting, platformKeys } = createRequire(
  import.meta.url,
)('../lib/platform.js');

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
  console.error(
    `fencelock: the platform package fencelock-${platformKeys()[0]} is not installed (npm ` +
      'installs one only where a prebuilt one exists: linux-x64-gnu); building the native module ' +
      'from source with cargo, which takes a few minutes (README, "Install")',
  );
}
// A build inside the installed package cleans up after itself: cargo's folder is gigabytes.
const ownTarget = root === shipped && !process.env.CARGO_TARGET_DIR;

const cargo = process.env.CARGO || 'cargo';
// The command's supervisor is Linux-only (cli/src/main.rs): elsewhere the module is built alone.
const withCommand = process.platform === 'linux';
const cargoArgs = [
  'build',
  '-p',
  'fencelock-node',
  ...(withCommand ? ['-p', 'fencelock-cli'] : []),
  '--profile',
  profile,
  '--message-format=json-render-diagnostics',
  ...(testHooks ? ['--features', 'fencelock-node/test-hooks'] : []),
];
console.error(`fencelock: ${cargo} ${cargoArgs.join(' ')}`);
const started = Date.now();
const run = spawnSync(cargo, cargoArgs, {
  cwd: root,
  stdio: ['ignore', 'pipe', 'inherit'],
  maxBuffer: 1 << 30,
  encoding: 'utf8',
});
if (run.error) {
  console.error(
    `fencelock: cannot run ${cargo} (${run.error.message}): no prebuilt native module fits ` +
      'this platform, and building one needs Rust (https://rustup.rs); install it and run ' +
      'npm install again',
  );
  process.exit(1);
}
if (run.status !== 0) {
  console.error(`fencelock: cargo build failed (exit ${run.status})`);
  process.exit(run.status || 1);
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
