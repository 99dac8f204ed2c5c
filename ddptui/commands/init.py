"""``ddptui init [PATH] [--force]``: write a commented starter hosts file."""

from __future__ import annotations

import argparse
import os
import shlex
import stat
import tempfile
from pathlib import Path

from ddptui.config import starter_text
from ddptui.errors import UsageError


def run(args: argparse.Namespace) -> int:
    """Write the starter file to ``args.path``; refuse to replace a file unless ``args.force``.

    The text goes to a temporary file beside the target first, then takes its name in one
    step, so the target is either untouched or complete. Only a regular file is ever
    replaced: a symbolic link (whose target would be clobbered), a FIFO (which would block),
    a directory or a device is refused.
    """
    path = Path(args.path)
    shown = shlex.quote(args.path)
    mode = _replaceable_mode(path, args) if args.force else None
    try:
        _write_new(path, starter_text(), replace=args.force, mode=mode)
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


def _replaceable_mode(path: Path, args: argparse.Namespace) -> int | None:
    """The permission bits of the regular file ``--force`` may replace (None: none there)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise UsageError(f"{args.path}: cannot write: {error.strerror or error}") from None
    if stat.S_ISREG(info.st_mode):
        return stat.S_IMODE(info.st_mode)
    kind = (
        "a symbolic link (its target is left alone)"
        if stat.S_ISLNK(info.st_mode)
        else "a directory"
        if stat.S_ISDIR(info.st_mode)
        else "not a regular file (a FIFO, socket or device)"
    )
    raise UsageError(f"{args.path} is {kind}; --force replaces regular files only")


def _write_new(path: Path, text: str, *, replace: bool, mode: int | None) -> None:
    if path.is_dir():
        raise IsADirectoryError(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temporary = Path(name)
    try:
        os.fchmod(fd, mode if mode is not None else 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        if replace:
            # rename() replaces the name itself: were it swapped for a link since the check,
            # the link is replaced, never followed.
            temporary.replace(path)
        else:
            # link() fails if the name exists, whatever it is: no check-then-write window.
            path.hardlink_to(temporary)
    finally:
        temporary.unlink(missing_ok=True)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
