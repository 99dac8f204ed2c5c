"""``ddptui init [PATH] [--force]``: write a commented starter hosts file."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ddptui.config import starter_text
from ddptui.errors import UsageError


def run(args: argparse.Namespace) -> int:
    """Write the starter file to ``args.path``; refuse to replace a file unless ``args.force``."""
    path = Path(args.path)
    shown = shlex.quote(args.path)
    # "x" creates the file only if it does not exist, so there is no window between checking
    # for the file and writing it.
    mode = "w" if args.force else "x"
    try:
        with path.open(mode, encoding="utf-8") as file:
            file.write(starter_text())
    except FileExistsError:
        raise UsageError(
            f"{args.path} already exists; `ddptui init {shown} --force` replaces it"
        ) from None
    except IsADirectoryError:
        raise UsageError(f"{args.path} is a directory; give a file name") from None
    except FileNotFoundError:
        raise UsageError(f"{args.path}: no such directory: {path.parent}") from None
    except OSError as error:
        raise UsageError(f"{args.path}: cannot write: {error.strerror or error}") from None
    print(f"wrote {args.path}: set each host's name and address, then `ddptui config {shown}`")
    return 0
