'use strict';
// Loads the native module: the one built into this package by scripts/build.mjs (or `napi build
// --platform`), else the one in this platform's package `fencelock-<key>` (release installs; see
// platform.js). FENCELOCK_NATIVE_MODULE points at another file, for development.

const path = require('node:path');
const { nativeModuleCandidates, firstExisting, platformKeys } = require('./platform.js');

function load() {
  const override = process.env.FENCELOCK_NATIVE_MODULE;
  if (override) return require(path.resolve(override));
  const tried = nativeModuleCandidates();
  const file = firstExisting(tried);
  if (file !== null) return require(file);
  const err = new Error(
    `fencelock: no native module for ${platformKeys()[0]}; looked for ${tried.join(', ')}. ` +
      `Install the platform package fencelock-${platformKeys()[0]}, or build the module with ` +
      '`npm run build` in a source checkout (needs Rust: cargo).',
  );
  err.code = 'INTERNAL';
  throw err;
}

module.exports = load();
