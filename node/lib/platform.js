'use strict';
// Where this platform's native files are. A source checkout (or `npm install ./node`) has them
// in the package itself: fencelock.<key>.node next to package.json and the command in native/.
// A release install has them in the platform package `fencelock-<key>` (napi-rs's layout: the
// main package lists every platform package as an optional dependency and npm installs only the
// one whose os/cpu/libc match), so adding a platform is publishing one more small package.
//
// A platform package is native code this process loads, so only one fencelock publishes counts:
// its name among the main package's optionalDependencies (release/npm-stage.mjs writes them) and
// its version exactly the main package's. Any other package of such a name may be anyone's (a
// name for a platform fencelock has no package for is free to register on npm), or another
// release's, built against other JavaScript. The lookups take `{ root, keys }` (default: this
// package's folder and this platform's keys), so a test can ask about any platform or install.

const fs = require('node:fs');
const path = require('node:path');

const packageRoot = path.join(__dirname, '..');

/** The napi-rs platform key: linux-x64-gnu, linux-arm64-musl, darwin-arm64, win32-x64-msvc, … */
function platformKeys() {
  const base = `${process.platform}-${process.arch}`;
  if (process.platform === 'linux') {
    const glibc = process.report?.getReport()?.header?.glibcVersionRuntime;
    return glibc ? [`${base}-gnu`, `${base}-musl`] : [`${base}-musl`, `${base}-gnu`];
  }
  if (process.platform === 'win32') return [`${base}-msvc`, base];
  return [base];
}

/** The main package's package.json: its name, exact version and optionalDependencies. */
function mainManifest(root) {
  try {
    return JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
  } catch {
    return {};
  }
}

/** The name of the platform package `manifest` publishes for `key`, or null if it has none. */
function publishedName(manifest, key) {
  const name = `${manifest.name ?? 'fencelock'}-${key}`;
  return Object.hasOwn(manifest.optionalDependencies ?? {}, name) ? name : null;
}

/**
 * The platform package fencelock publishes for this platform (keys[0]; the other keys are
 * fallbacks, never what npm installs here), or null: the one name messages may suggest.
 */
function publishedPlatformPackage({ root = packageRoot, keys = platformKeys() } = {}) {
  return publishedName(mainManifest(root), keys[0]);
}

/**
 * The installed platform packages this package may load, for each of `keys` in order, and why
 * each other installed package of such a name is not loaded (`skipped`, for the error message).
 */
function platformPackages({ root = packageRoot, keys = platformKeys() } = {}) {
  const manifest = mainManifest(root);
  const usable = [];
  const skipped = [];
  for (const key of keys) {
    const name = `${manifest.name ?? 'fencelock'}-${key}`;
    let manifestFile;
    try {
      // package.json, not the package's main: resolving reads no code of the package.
      manifestFile = require.resolve(`${name}/package.json`, { paths: [root] });
    } catch {
      continue; // not installed
    }
    const dir = path.dirname(manifestFile);
    if (publishedName(manifest, key) === null) {
      skipped.push(`${dir}: fencelock ${manifest.version} does not publish a package ${name}`);
      continue;
    }
    let version;
    try {
      version = JSON.parse(fs.readFileSync(manifestFile, 'utf8')).version;
    } catch (err) {
      skipped.push(`${dir}: its package.json is unreadable (${err.message})`);
      continue;
    }
    if (version !== manifest.version) {
      skipped.push(`${dir}: version ${version}, not fencelock's ${manifest.version}`);
      continue;
    }
    usable.push({ key, dir });
  }
  return { usable, skipped };
}

/** Every place the native module may be, in the order to try them. */
function nativeModuleCandidates({ root = packageRoot, keys = platformKeys() } = {}) {
  const local = keys.map((key) => path.join(root, `fencelock.${key}.node`));
  const packaged = platformPackages({ root, keys }).usable.map(({ key, dir }) =>
    path.join(dir, `fencelock.${key}.node`),
  );
  return [...local, ...packaged];
}

/** Every place the compiled `fencelock` command may be, in the order to try them. */
function commandCandidates({ root = packageRoot, keys = platformKeys() } = {}) {
  const name = process.platform === 'win32' ? 'fencelock.exe' : 'fencelock';
  const packaged = platformPackages({ root, keys }).usable.map(({ dir }) => path.join(dir, name));
  return [path.join(root, 'native', name), ...packaged];
}

function firstExisting(files) {
  return files.find((file) => fs.existsSync(file)) ?? null;
}

/**
 * Why this platform's native files are missing and what gets them, in sentences that hold on
 * every platform: a platform package is named only where fencelock publishes one for it.
 */
function missingNativeAdvice({ root = packageRoot, keys = platformKeys() } = {}) {
  const key = keys[0];
  // In a checkout node/ is also the native module's crate; a released package has its in source/.
  if (fs.existsSync(path.join(root, 'Cargo.toml'))) {
    return 'In a source checkout, build it with `npm run build` in node/ (needs Rust: cargo).';
  }
  const rebuild =
    'run `npm rebuild fencelock --foreground-scripts` to build it from source and watch the ' +
    'build (npm hides the output of install scripts otherwise).';
  const { name, version } = mainManifest(root);
  const published = publishedPlatformPackage({ root, keys });
  if (published !== null) {
    return (
      `Its platform package ${published} ${version} is not installed: npm installs it with ` +
      `${name} unless optional dependencies are left out (--omit=optional), and without it the ` +
      'install builds the native files from source, which needs Rust (cargo, ' +
      `https://rustup.rs). Install ${name} again with optional dependencies, or ${rebuild}`
    );
  }
  return (
    `fencelock has no prebuilt native module for ${key}: installing it builds one from the ` +
    'Rust sources the package ships, which needs Rust (cargo, https://rustup.rs) and takes a ' +
    `few minutes. If that build did not run or failed, ${rebuild}`
  );
}

module.exports = {
  platformKeys,
  publishedPlatformPackage,
  platformPackages,
  nativeModuleCandidates,
  commandCandidates,
  firstExisting,
  missingNativeAdvice,
};
