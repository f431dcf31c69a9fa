// Which native files lib/platform.js chooses, and what the package says when it finds none
// (issue 56). Each test lays out a project the way npm installs a release (lib/, bin/ and
// scripts/ of this package copied into node_modules/fencelock/, a manifest as
// release/npm-stage.mjs writes it, and sometimes a dummy platform package beside it) and asks the
// copied platform.js, native.js or bin/fencelock.js: they find their package by their own folder,
// as in a real install. Nothing here loads a native file: the dummy ones are text.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, cpSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { tempDir } from './helpers.mjs';

const pkg = fileURLToPath(new URL('..', import.meta.url));
const require = createRequire(import.meta.url);
const { version: VERSION } = JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8'));
const HOST_KEY = require('../lib/platform.js').platformKeys()[0];

/**
 * A project with the main package installed, publishing a platform package for each key of
 * `published` (its optionalDependencies), and, when `platformVersion` is given, the platform
 * package of this host installed with that version. Returns the folders.
 */
function installedProject({ published = [HOST_KEY], platformVersion = null } = {}) {
  const project = tempDir();
  const main = join(project, 'node_modules', 'fencelock');
  for (const entry of ['lib', 'bin', 'scripts']) {
    cpSync(join(pkg, entry), join(main, entry), { recursive: true });
  }
  writeJson(join(main, 'package.json'), {
    name: 'fencelock',
    version: VERSION,
    optionalDependencies: Object.fromEntries(published.map((key) => [`fencelock-${key}`, VERSION])),
  });
  const platformDir = join(project, 'node_modules', `fencelock-${HOST_KEY}`);
  if (platformVersion !== null) {
    mkdirSync(platformDir, { recursive: true });
    writeJson(join(platformDir, 'package.json'), {
      name: `fencelock-${HOST_KEY}`,
      version: platformVersion,
    });
    writeFileSync(join(platformDir, `fencelock.${HOST_KEY}.node`), 'not a native module\n');
    writeFileSync(join(platformDir, 'fencelock'), '#!/bin/sh\necho dummy fencelock\n');
    chmodSync(join(platformDir, 'fencelock'), 0o755);
  }
  return { project, main, platformDir };
}

function writeJson(file, value) {
  writeFileSync(file, `${JSON.stringify(value, null, 2)}\n`);
}

/** The copy of lib/platform.js inside `main`, fresh (require caches by path, each path is new). */
function platformOf(main) {
  return createRequire(join(main, 'package.json'))('./lib/platform.js');
}

/** The message lib/native.js throws in `main` when it finds no native module. */
function nativeLoadError(main) {
  const r = spawnSync(
    process.execPath,
    ['-e', `require(${JSON.stringify(join(main, 'lib', 'native.js'))})`],
    { encoding: 'utf8', env: withoutOverrides() },
  );
  assert.notEqual(r.status, 0, 'native.js found no native module and threw');
  return r.stderr;
}

function withoutOverrides() {
  const env = { ...process.env };
  delete env.FENCELOCK_NATIVE_MODULE;
  return env;
}

test('a platform package of another version than fencelock is not chosen', () => {
  const { main } = installedProject({ platformVersion: '0.0.1-other' });
  const platform = platformOf(main);
  assert.equal(platform.firstExisting(platform.nativeModuleCandidates()), null);
  assert.equal(platform.firstExisting(platform.commandCandidates()), null);
  const message = nativeLoadError(main);
  assert.match(message, /0\.0\.1-other/, 'the error says which package was skipped and why');
  assert.match(message, new RegExp(`fencelock-${HOST_KEY}`));
});

test('the platform package of exactly fencelock’s version is chosen', () => {
  const { main, platformDir } = installedProject({ platformVersion: VERSION });
  const platform = platformOf(main);
  assert.equal(
    platform.firstExisting(platform.nativeModuleCandidates()),
    join(platformDir, `fencelock.${HOST_KEY}.node`),
  );
  assert.equal(
    platform.firstExisting(platform.commandCandidates()),
    join(platformDir, 'fencelock'),
  );
});

test('a package named like a platform package that fencelock does not publish is not chosen', () => {
  // Anyone may register fencelock-<key> for a platform the project has no package for.
  const { main } = installedProject({ published: [], platformVersion: VERSION });
  const platform = platformOf(main);
  assert.equal(platform.firstExisting(platform.nativeModuleCandidates()), null);
  assert.equal(platform.firstExisting(platform.commandCandidates()), null);
  assert.match(nativeLoadError(main), /does not publish/);
});

test('on a platform without a platform package, native.js names none and says how it builds', () => {
  const { main } = installedProject({ published: [] });
  const message = nativeLoadError(main);
  assert.doesNotMatch(message, new RegExp(`fencelock-${HOST_KEY}`), 'an unpublished name');
  assert.match(message, /no prebuilt native module/);
  assert.match(message, /Rust/);
  assert.match(message, /--foreground-scripts/);
});

test('where a platform package is published but missing, native.js names that one', () => {
  const { main } = installedProject();
  const message = nativeLoadError(main);
  assert.match(message, new RegExp(`fencelock-${HOST_KEY}`));
  assert.match(message, /--foreground-scripts/);
});

test('the advice for each platform names only what the main package publishes', () => {
  const { main } = installedProject({ published: ['linux-x64-gnu'] });
  const platform = platformOf(main);
  for (const key of ['darwin-arm64', 'darwin-x64', 'linux-arm64-musl', 'win32-x64-msvc']) {
    const advice = platform.missingNativeAdvice({ keys: [key] });
    assert.doesNotMatch(advice, /fencelock-[a-z]/, `${key}: ${advice}`);
    assert.match(advice, new RegExp(`no prebuilt native module for ${key}`));
    assert.match(advice, /Rust/);
    assert.match(advice, /npm rebuild fencelock --foreground-scripts/);
  }
  // On musl the gnu package is published but does not fit: it is not suggested.
  const musl = platform.missingNativeAdvice({ keys: ['linux-x64-musl', 'linux-x64-gnu'] });
  assert.doesNotMatch(musl, /fencelock-linux-x64-gnu/);
  assert.match(
    platform.missingNativeAdvice({ keys: ['linux-x64-gnu'] }),
    /fencelock-linux-x64-gnu/,
  );
});

test('the fencelock command names no unpublished package when it finds no binary', () => {
  const { main } = installedProject({ published: [] });
  const r = spawnSync(process.execPath, [join(main, 'bin', 'fencelock.js'), '--version'], {
    encoding: 'utf8',
    // PATH is only node's folder: the shim's last resort, a `fencelock` on PATH, finds none.
    env: { ...withoutOverrides(), PATH: dirname(process.execPath) },
  });
  assert.equal(r.status, 125, r.stderr);
  assert.doesNotMatch(r.stderr, /fencelock-</);
  assert.doesNotMatch(r.stderr, new RegExp(`fencelock-${HOST_KEY}`));
  assert.match(r.stderr, /no prebuilt native module/);
});
