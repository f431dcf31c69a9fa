#!/usr/bin/env python3
"""Prints fencelock's version: the workspace version in the root Cargo.toml, the one place it is
set. The wheel (maturin reads the crate's version), the npm packages (stamped by
release/npm-stage.mjs), the Maven POM and the CLI tarball all take it from here."""

import pathlib
import sys
import tomllib

root = pathlib.Path(__file__).resolve().parent.parent
with open(root / "Cargo.toml", "rb") as manifest:
    version = tomllib.load(manifest)["workspace"]["package"]["version"]
if not version:
    sys.exit("release/version.py: no [workspace.package] version in Cargo.toml")
print(version)
