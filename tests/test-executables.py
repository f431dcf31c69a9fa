"""Reads `cargo test --no-run --message-format=json` on stdin and prints one line per test
executable: `<package folder>/<target name>`, its path and its package folder, tab-separated
(e.g. `core/it	/…/target/debug/deps/it-1a2b…	/…/core`). tests/run-all.sh runs them directly."""

import json
import sys
from pathlib import Path

for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") != "compiler-artifact" or not message.get("executable"):
        continue
    if not message["profile"]["test"]:
        continue
    package = Path(message["manifest_path"]).parent
    print(f"{package.name}/{message['target']['name']}\t{message['executable']}\t{package}")
