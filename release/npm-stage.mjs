#!/usr/bin/env node
// Stages the two npm packages of a release from node/ and the prebuilt native files, the napi-rs
// platform-package layout:
//   fencelock                 the JavaScript API, types and the `fencelock` shim; it lists
//                             every platform package as an optional dependency
//   fencelock-linux-x64-gnu   this platform's native module and `fencelock` command; os, cpu
//                             and libc fields let npm install only the matching one
// Another platform is one more entry in PLATFORMS and one more package built on that platform.
//
//   node release/npm-stage.mjs --version V --module M.node --command BIN --out DIR
import {
  chmodSync,
  copyFileSync,
  cpSync,
  mkdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const source = join(root, 'node');

// Platforms a release publishes; only those with files given on the command line are staged.
const PLATFORMS = {
  'linux-x64-gnu': { os: ['linux'], cpu: ['x64'], libc: ['glibc'] },
};

const { values } = parseArgs({
  options: {
    version: { type: 'string' },
    platform: { type: 'string', default: 'linux-x64-gnu' },
    module: { type: 'string' },
    command: { type: 'string' },
    out: { type: 'string' },
  },
});
for (const required of ['version', 'module', 'command', 'out']) {
  if (!values[required]) throw new Error(`npm-stage: --${required} is required`);
}
const { version, platform, out } = values;
if (!PLATFORMS[platform]) throw new Error(`npm-stage: unknown platform ${platform}`);

const sourceManifest = JSON.parse(readFileSync(join(source, 'package.json'), 'utf8'));
const common = {
  version,
  license: sourceManifest.license,
  repository: sourceManifest.repository,
  engines: sourceManifest.engines,
};

function writeManifest(dir, manifest) {
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
}

// The platform package: nothing but the native files.
const platformName = `${sourceManifest.name}-${platform}`;
const platformDir = join(out, platformName);
rmSync(platformDir, { recursive: true, force: true });
mkdirSync(platformDir, { recursive: true });
const moduleFile = `fencelock.${platform}.node`;
copyFileSync(values.module, join(platformDir, moduleFile));
copyFileSync(values.command, join(platformDir, 'fencelock'));
chmodSync(join(platformDir, 'fencelock'), 0o755);
writeManifest(platformDir, {
  name: platformName,
  ...common,
  description: `The ${platform} native module and command of fencelock`,
  main: moduleFile,
  files: [moduleFile, 'fencelock'],
  ...PLATFORMS[platform],
});
writeFileSync(
  join(platformDir, 'README.md'),
  `# ${platformName}\n\nThe ${platform} binaries of [fencelock](https://www.npmjs.com/package/fencelock). ` +
    'Install `fencelock`, not this package: npm picks the platform package that matches.\n',
);

// The main package: the JavaScript layer, and the Rust sources of the native files for a
// platform without a platform package (source/, release/source_tree.py). Its install script
// does nothing where npm installed the platform package, and builds from source/ elsewhere
// (node/scripts/build.mjs --if-missing; it needs Rust there).
const mainDir = join(out, sourceManifest.name);
rmSync(mainDir, { recursive: true, force: true });
mkdirSync(mainDir, { recursive: true });
const shipped = [
  'index.js',
  'index.mjs',
  'index.d.ts',
  'lib',
  'bin',
  'scripts/build.mjs',
  'README.md',
];
for (const entry of shipped) cpSync(join(source, entry), join(mainDir, entry), { recursive: true });
const tree = spawnSync(
  'python3',
  [
    join(root, 'release', 'source_tree.py'),
    '--members',
    'core,cli,node',
    '--out',
    join(mainDir, 'source'),
  ],
  { stdio: 'inherit' },
);
if (tree.status !== 0) throw new Error('npm-stage: release/source_tree.py failed');
const { scripts, devDependencies, napi, files, ...kept } = sourceManifest;
writeManifest(mainDir, {
  ...kept,
  ...common,
  files: [...shipped, 'source']
    .filter((entry) => entry !== 'README.md')
    .map((entry) => (entry.includes('.') ? entry : `${entry}/`)),
  scripts: { install: 'node scripts/build.mjs --if-missing' },
  optionalDependencies: Object.fromEntries(
    Object.keys(PLATFORMS).map((key) => [`${sourceManifest.name}-${key}`, version]),
  ),
});
console.log(JSON.stringify({ main: mainDir, platform: platformDir }));
