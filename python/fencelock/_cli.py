"""The ``fencelock`` console script: replaces this Python process with the compiled command.

The command has one implementation (Rust, shipped inside this package as ``_bin/fencelock``).
``os.execv`` hands the process over to it before any lock work starts, so signals, the guardian
process and exit codes are the command's own; Python handles none of them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_PACKAGED = Path(__file__).resolve().parent / "_bin" / "fencelock"


def binary_path() -> str:
    """Path of the ``fencelock`` executable shipped in this package."""
    if not os.access(_PACKAGED, os.X_OK):
        if not sys.platform.startswith("linux"):
            raise FileNotFoundError(
                "the fencelock command runs on Linux only (its supervisor is written against "
                "Linux); on this system the package has the library without it"
            )
        raise FileNotFoundError(
            f"the fencelock command is missing from this installation ({_PACKAGED}); "
            "reinstall the package from a wheel or with `pip install ./python`"
        )
    return str(_PACKAGED)


def main() -> None:
    try:
        binary = binary_path()
    except FileNotFoundError as error:
        print(f"fencelock: {error}", file=sys.stderr)
        sys.exit(127)
    os.execv(binary, [binary, *sys.argv[1:]])


if __name__ == "__main__":
    main()
