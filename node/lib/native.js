'use strict';
// Loads the native module: the one built into this package by scripts/build.mjs (or `napi build
// --platform`), else the one in this platform's package `fencelock-<key>` if fencelock publishes
// it and its version is fencelock's (release installs; see platform.js). FENCELOCK_NATIVE_MODULE
// points at another file, for development.

const path = require('node:path');
const {
  nativeModuleCandidates,
  firstExisting,
  platformKeys,
  platformPackages,
  missingNativeAdvice,
} = require('./platform.js');

function load() {
  const override = process.env.FENCELOCK_NATIVE_MODULE;
  if (override) return require(path.resolve(override));
  const tried = nativeModuleCandidates();
  const file = firstExisting(tried);
  if (file !== null) return require(file);
  // Installed packages that were not loaded, and why: a leftover of another release, or a
  // package of a platform package's name that fencelock does not publish.
  const { skipped } = platformPackages();
  const err = new Error(
    `fencelock: no native module for ${platformKeys()[0]}; looked for ${tried.join(', ')}. ` +
      (skipped.length > 0 ? `Not loaded: ${skipped.join('; ')}. ` : '') +
      missingNativeAdvice(),
  );
  err.code = 'INTERNAL';
  throw err;
}

module.exports = load();
