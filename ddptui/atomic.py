"""What ddptui makes on this machine: directories and files with modes of their own, whatever
the umask, and a file replaced whole or not at all.

The umask is no one's choice for ddptui's files: 002, common where users share a primary group,
would let the group rename a run out of the store and put its own record under the same id.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

PRIVATE_DIR = 0o700
"""The store and what ddptui keeps beside it (the kept checks): only the user may look."""
PRIVATE_FILE = 0o600
WORKDIR_DIR = 0o755
"""What the head makes in a Slurm run's workdir, which its nodes share: the modes the hosts'
agent gives what it makes there (:mod:`ddptui.onhost.common`, which the head cannot import)."""
WORKDIR_FILE = 0o644
WORKDIR_EXECUTABLE = 0o755
PYCACHE = "__pycache__"
"""Made beside the Python files staged in a workdir, as the hosts' agent does: the first import
would make it with the umask, and a ``.pyc`` someone else put there would run instead."""


def make_dirs(path: Path, mode: int = PRIVATE_DIR, *, exist_ok: bool = True) -> None:
    """``path`` and each missing directory above it, each made with ``mode`` exactly; those
    that exist are left as they are (a home, ``~/.local``: not ddptui's to change).
    ``FileExistsError`` when ``path`` exists and not ``exist_ok``."""
    missing = []
    level = path
    while not level.exists():
        missing.append(level)
        level = level.parent
    if not missing and not exist_ok:
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
    for level in reversed(missing):
        try:
            # The umask only takes bits away: never wider than ``mode``, even before the chmod.
            level.mkdir(mode)
        except FileExistsError:
            if level == path and not exist_ok:
                raise
            # Made meanwhile by another process: not this call's to set.
            continue
        level.chmod(mode)


def open_file(path: Path, flags: int, mode: int = PRIVATE_FILE) -> int:
    """A descriptor of ``path`` opened with ``flags``: a file made now has ``mode`` exactly
    from the start; one that exists is left as it is (a known_hosts file is the user's)."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        if flags & os.O_EXCL:
            raise
        return os.open(path, flags)
    try:
        os.fchmod(fd, mode)
    except OSError:
        os.close(fd)
        raise
    return fd


def write_new(path: Path, data: str | bytes, mode: int = PRIVATE_FILE) -> None:
    """Write ``data`` (text as UTF-8) to ``path``, a file that must not exist yet, made with
    ``mode``: for the many files of a directory just made (a dump's stacks), where a rename and
    a sync each, as :func:`write_atomic` pays, would cost seconds on a slow home directory."""
    with os.fdopen(open_file(path, os.O_WRONLY | os.O_EXCL, mode), "wb") as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)


def write_atomic(path: Path, data: str | bytes, mode: int = PRIVATE_FILE) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` with ``mode``, through a temporary file beside
    it, synced before the rename: a head node that loses power keeps the old file or the new
    one, never a half-written file under its name."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = open_file(temporary, os.O_WRONLY | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
