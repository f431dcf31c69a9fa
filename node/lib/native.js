'use strict';
// Loads the native module built by scripts/build.mjs (or `napi build --platform`), named as
// napi-rs names it: fencelock.<platform>-<arch>[-<abi>].node, next to package.json.
// FENCELOCK_NATIVE_MODULE points at another file, for development.

const path = require('node:path');
const fs = require('node:fs');

function candidates() {
  const base = `fencelock.${process.platform}-${process.arch}`;
  const names = process.platform === 'linux' ? [`${base}-gnu.node`, `${base}-musl.node`] : [`${base}.node`];
  if (process.platform === 'win32') names.unshift(`${base}-msvc.node`);
  return names.map((n) => path.join(__dirname, '..', n));
}

function load() {
  const override = process.env.FENCELOCK_NATIVE_MODULE;
  if (override) return require(path.resolve(override));
  const tried = candidates();
  for (const file of tried) {
    if (fs.existsSync(file)) return require(file);
  }
  const err = new Error(
    `fencelock: no native module for ${process.platform}-${process.arch}; looked for ${tried.join(', ')}. ` +
      'Build it with `npm run build` in the package folder (needs Rust: cargo).',
  );
  err.code = 'INTERNAL';
  throw err;
}

module.exports = load();
