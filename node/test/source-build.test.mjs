// The install of a released package where no platform package fits (issue 56): the install
// script, scripts/build.mjs --if-missing, compiles the Rust sources the package ships in
// source/ (release/source_tree.py). Here a stand-in for cargo (CARGO) answers in a second, so
// what is checked is what build.mjs asks of cargo and tells the user, not a compile: the real
// one is release/source-smoke.sh. The last test stages source/ as a release does and checks
// its Cargo.lock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { tempDir } from './helpers.mjs';

const pkg = fileURLToPath(new URL('..', import.meta.url));
const repo = dirname(pkg);
const { version: VERSION } = JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8'));
const HOST_KEY = createRequire(import.meta.url)('../lib/platform.js').platformKeys()[0];
const CARGO_LINES = 60;

/**
 * The main package as npm unpacks it before its install script runs: no platform package (none
 * is published for `published` other than the host's, or it was left out), Rust sources in
 * source/, and a stand-in cargo that records its arguments. With `failing` it writes
 * CARGO_LINES lines to stderr and exits 101; else it "builds" two dummy files, as cargo's JSON
 * messages report them, and leaves a target/ folder behind as cargo does.
 */
function packageToInstall({ published = [], failing = false } = {}) {
  const project = tempDir();
  const main = join(project, 'node_modules', 'fencelock');
  for (const entry of ['lib', 'scripts']) {
    cpSync(join(pkg, entry), join(main, entry), { recursive: true });
  }
  writeFileSync(
    join(main, 'package.json'),
    JSON.stringify({
      name: 'fencelock',
      version: VERSION,
      optionalDependencies: Object.fromEntries(
        published.map((key) => [`fencelock-${key}`, VERSION]),
      ),
    }),
  );
  mkdirSync(join(main, 'source'));
  writeFileSync(join(main, 'source', 'Cargo.toml'), '# the sources a release ships\n');

  const tools = join(project, 'tools');
  mkdirSync(tools);
  const built = join(tools, 'built');
  mkdirSync(built);
  writeFileSync(join(built, 'libfencelock_node.so'), 'dummy module\n');
  writeFileSync(join(built, 'fencelock'), 'dummy command\n');
  const artifacts = [
    {
      reason: 'compiler-artifact',
      target: { name: 'fencelock_node', kind: ['cdylib'] },
      filenames: [join(built, 'libfencelock_node.so')],
    },
    {
      reason: 'compiler-artifact',
      target: { name: 'fencelock', kind: ['bin'] },
      filenames: [],
      executable: join(built, 'fencelock'),
    },
  ];
  const cargo = join(tools, 'cargo');
  const script = failing
    ? `i=1\nwhile [ $i -le ${CARGO_LINES} ]; do echo "cargo output line $i" >&2; i=$((i + 1)); done\nexit 101\n`
    : `mkdir -p target\ncat <<'EOF'\n${artifacts.map((a) => JSON.stringify(a)).join('\n')}\nEOF\n`;
  writeFileSync(
    cargo,
    `#!/bin/sh\nprintf '%s\\n' "$@" > '${join(tools, 'cargo-args')}'\n${script}`,
  );
  chmodSync(cargo, 0o755);
  return {
    main,
    cargo,
    cargoArgs: () => readFileSync(join(tools, 'cargo-args'), 'utf8').split('\n'),
  };
}

/** Runs the install script as npm runs it: in the package's folder, its output captured. */
function runInstallScript({ main, cargo }, extraEnv = {}) {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(
      ([name]) =>
        !name.startsWith('npm_') &&
        !['FENCELOCK_SKIP_BUILD', 'FENCELOCK_PROFILE', 'CARGO_TARGET_DIR'].includes(name),
    ),
  );
  return spawnSync(process.execPath, ['scripts/build.mjs', '--if-missing'], {
    cwd: main,
    encoding: 'utf8',
    // npm runs a dependency's install script with these set, its output piped (hidden).
    env: { ...env, CARGO: cargo, npm_lifecycle_event: 'install', ...extraEnv },
  });
}

test('the source build runs cargo with --locked and installs what it built', () => {
  const install = packageToInstall();
  const r = runInstallScript(install);
  assert.equal(r.status, 0, r.stderr);
  assert.ok(install.cargoArgs().includes('--locked'), install.cargoArgs().join(' '));
  assert.ok(existsSync(join(install.main, `fencelock.${HOST_KEY}.node`)));
  assert.ok(!existsSync(join(install.main, 'source', 'target')), 'cargo’s folder is deleted');
});

test('the source build’s message names no platform package fencelock does not publish', () => {
  const r = runInstallScript(packageToInstall());
  assert.equal(r.status, 0, r.stderr);
  assert.doesNotMatch(r.stderr, new RegExp(`fencelock-${HOST_KEY}`));
  assert.match(r.stderr, new RegExp(`no prebuilt native module for ${HOST_KEY}`));
  // Where the platform package is published but was left out (--omit=optional), it is named.
  const omitted = runInstallScript(packageToInstall({ published: [HOST_KEY] }));
  assert.match(omitted.stderr, new RegExp(`fencelock-${HOST_KEY}`));
});

test('a failed source build prints the tail of cargo’s output and keeps the whole log', () => {
  const r = runInstallScript(packageToInstall({ failing: true }));
  assert.notEqual(r.status, 0);
  // npm shows a failed script's output: its end is cargo's error, not the whole compile.
  assert.match(r.stderr, /cargo output line 60\n/);
  assert.doesNotMatch(r.stderr, /cargo output line 1\n/);
  assert.match(readFileSync(keptLog(r.stderr), 'utf8'), /cargo output line 1\n[\s\S]*line 60\n/);
});

test('with --foreground-scripts cargo’s output is shown as it runs', () => {
  const r = runInstallScript(packageToInstall({ failing: true }), {
    npm_config_foreground_scripts: 'true',
  });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /cargo output line 1\n/);
  keptLog(r.stderr);
});

/** The log a failed build names (its folder is removed when the tests end). */
function keptLog(stderr) {
  const log = stderr.match(/whole log: (\S+)/);
  assert.ok(log, stderr);
  process.on('exit', () => rmSync(dirname(log[1]), { recursive: true, force: true }));
  return log[1];
}

test('the staged source tree’s Cargo.lock is the repository’s, pruned to its members', () => {
  const out = join(tempDir(), 'source');
  const staged = spawnSync(
    'python3',
    [join(repo, 'release', 'source_tree.py'), '--members', 'core,cli,node', '--out', out],
    { encoding: 'utf8' },
  );
  assert.equal(staged.status, 0, staged.stderr);
  // Every package kept is one the repository locks, at the same version, source and checksum.
  const original = new Set(lockedPackages(join(repo, 'Cargo.lock')));
  const kept = lockedPackages(join(out, 'Cargo.lock'));
  for (const pkg of kept) assert.ok(original.has(pkg), `changed or added: ${pkg}`);
  // The Python extension is not built from this tree: its crates are gone.
  assert.ok(!kept.some((pkg) => /^(fencelock-python|pyo3) /.test(pkg)), kept.join('\n'));
  // cargo takes it as it is: the install's `cargo build --locked` would fail otherwise.
  const tree = spawnSync(
    process.env.CARGO || 'cargo',
    ['tree', '--locked', '--offline', '-e', 'all'],
    {
      cwd: out,
      encoding: 'utf8',
    },
  );
  assert.equal(tree.status, 0, tree.stderr);
});

/** The packages of a Cargo.lock, each as "name version source checksum". */
function lockedPackages(file) {
  const field = (entry, name) => entry.match(new RegExp(`^${name} = "([^"]*)"$`, 'm'))?.[1] ?? '-';
  return readFileSync(file, 'utf8')
    .split('\n[[package]]\n')
    .slice(1)
    .map((entry) =>
      ['name', 'version', 'source', 'checksum'].map((f) => field(entry, f)).join(' '),
    );
}
