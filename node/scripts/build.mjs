#!/usr/bin/env node
// Builds the native module and the `fencelock` command with cargo, and copies both into this
// package: fencelock.<platform>-<arch>[-gnu].node next to package.json (the name napi-rs uses)
// and native/fencelock (what `bin/fencelock.js` runs). `npm install ./node`, `npm run build`
// and node/run-tests.sh all come here.
//
//   node scripts/build.mjs [--profile release|dev] [--test-hooks]
//
// --test-hooks builds the native module with the test-only `test-hooks` feature (exports that
// panic on purpose, for the tests); node/run-tests.sh passes it, an install never does.
//
// Environment: FENCELOCK_PROFILE (default release; run-tests.sh uses dev), CARGO (default
// cargo), CARGO_TARGET_DIR (default: the workspace's target/), FENCELOCK_SKIP_BUILD=1 (use
// files already in place). Plain cargo instead of `napi build`: it builds into the workspace's
// target folder for the host, so the dependency tree already compiled by `cargo test` is reused
// (`napi build --platform` builds for an explicit target triple into a folder of its own).
import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, renameSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(dirname(fileURLToPath(import.meta.url)));
const root = dirname(here);

const args = process.argv.slice(2);
const at = args.indexOf('--profile');
const profile = at >= 0 ? args[at + 1] : process.env.FENCELOCK_PROFILE || 'release';
const testHooks = args.includes('--test-hooks');
const libc =
  process.platform === 'linux'
    ? process.report?.getReport()?.header?.glibcVersionRuntime
      ? '-gnu'
      : '-musl'
    : '';
const moduleFile = join(here, `fencelock.${process.platform}-${process.arch}${libc}.node`);
const cliFile = join(here, 'native', process.platform === 'win32' ? 'fencelock.exe' : 'fencelock');

if (process.env.FENCELOCK_SKIP_BUILD === '1') {
  console.log('fencelock: FENCELOCK_SKIP_BUILD=1, using the files in place');
  process.exit(0);
}
if (!existsSync(join(root, 'Cargo.toml')) || !existsSync(join(here, 'Cargo.toml'))) {
  if (existsSync(moduleFile)) process.exit(0); // a package with its native module built in
  console.error('fencelock: no prebuilt native module and no Rust sources to build it from');
  process.exit(1);
}

const cargo = process.env.CARGO || 'cargo';
const cargoArgs = [
  'build',
  '-p',
  'fencelock-node',
  '-p',
  'fencelock-cli',
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
    `fencelock: cannot run ${cargo} (Rust is needed to build the native module): ${run.error.message}`,
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
if (!library || !executable) {
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
install(executable, cliFile, 0o755);
console.error(
  `fencelock: built (${profile}) in ${Math.round((Date.now() - started) / 1000)}s: ${moduleFile}, ${cliFile}`,
);
