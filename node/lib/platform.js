'use strict';
// Where this platform's native files are. A source checkout (or `npm install ./node`) has them
// in the package itself: fencelock.<key>.node next to package.json and the command in native/.
// A release install has them in the platform package `fencelock-<key>` (napi-rs's layout: the
// main package lists every platform package as an optional dependency and npm installs only the
// one whose os/cpu/libc match), so adding a platform is publishing one more small package.

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

/** The folder of an installed platform package, or null. */
function platformPackageDir(key) {
  try {
    return path.dirname(require.resolve(`fencelock-${key}/package.json`, { paths: [packageRoot] }));
  } catch {
    return null;
  }
}

/** Every place the native module may be, in the order to try them. */
function nativeModuleCandidates() {
  const keys = platformKeys();
  const local = keys.map((key) => path.join(packageRoot, `fencelock.${key}.node`));
  const packaged = keys.flatMap((key) => {
    const dir = platformPackageDir(key);
    return dir ? [path.join(dir, `fencelock.${key}.node`)] : [];
  });
  return [...local, ...packaged];
}

/** Every place the compiled `fencelock` command may be, in the order to try them. */
function commandCandidates() {
  const name = process.platform === 'win32' ? 'fencelock.exe' : 'fencelock';
  const packaged = platformKeys().flatMap((key) => {
    const dir = platformPackageDir(key);
    return dir ? [path.join(dir, name)] : [];
  });
  return [path.join(packageRoot, 'native', name), ...packaged];
}

function firstExisting(files) {
  return files.find((file) => fs.existsSync(file)) ?? null;
}

module.exports = { platformKeys, nativeModuleCandidates, commandCandidates, firstExisting };
