"""What every agent command shares: how it answers (one JSON document a line), how it makes a
directory or a file (with a mode of its own, whatever the umask; a file atomically), and the
names of the run's files and processes it looks for."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import sys
from importlib.abc import InspectLoader
from pathlib import Path
from typing import Any

MAX_LINE = 16384
"""Longer lines are cut (the rest up to the newline is skipped); the head caps them anyway."""


READ_CHUNK = 1 << 20


POLL_S = 0.25


HEARTBEAT_S = 2.0


SETTLED_S = 1.0


WAIT_POLL_S = 0.25


CACHE_DAYS = 14


# These two patterns are ddptui.layout's (this file cannot import it); a test keeps them equal.
FOLLOWED = re.compile(
    r"^(events/[^/]+\.jsonl"
    r"|logs/attempt-\d+/.+/(stdout|stderr)\.log"
    r"|logs/attempt-\d+/.+/error\.json"
    r"|node/attempt-\d+\.(out|exit))$"
)


RUN_MARK = "DDPTUI_RUN_DIR"


ATTEMPT_MARK = "DDPTUI_ATTEMPT"


STACKS_MARK = "DDPTUI_STACKS_DIR"


ATTEMPT_FILE = re.compile(r"^attempt-(\d+)\.(pgid|exit)$")


FLIGHT_FILE = re.compile(r"^flight_(\d{1,6})$")


XID_MARK = "NVRM: Xid"
"""What marks the NVIDIA driver's Xid lines in the kernel's log."""


def emit(document: dict[str, Any]) -> None:
    # Flushed at exit, or by ``follow`` once per round: a flush per line was a packet per line
    # on the SSH channel, which the head node pays for in CPU.
    sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")


DIR_MODE = 0o755
"""Every directory ddptui makes on a host. Another user who could write in one could replace
what the ranks import (``sitecustomize.py``, the staged code), so no one else may, whatever the
umask (002 on many clusters, whose users share a primary group); reading is left as under the
common umask 022: what is there that others must not read is in files made private."""
FILE_MODE = 0o644
EXECUTABLE_MODE = 0o755
PRIVATE_FILE_MODE = 0o600
"""The run record (the ``env`` it holds may carry tokens) and the content cache."""


PYCACHE = "__pycache__"
"""Made beside the Python files ddptui puts on a host: the first import would make it with the
umask, and a ``.pyc`` someone else put there would run instead of its source."""


def make_dirs(path: Path, mode: int = DIR_MODE) -> None:
    """``path`` and each missing directory above it, each made with ``mode`` exactly; those
    that exist are left as they are (the workdir, a home: not ddptui's to change)."""
    missing = []
    level = path
    while not level.exists():
        missing.append(level)
        level = level.parent
    for level in reversed(missing):
        try:
            # The umask only takes bits away: never wider than ``mode``, even before the chmod.
            level.mkdir(mode)
        except FileExistsError:
            # Made meanwhile by another (a host sharing the workdir): not this call's to set.
            continue
        level.chmod(mode)


def open_file(path: Path, flags: int, mode: int = FILE_MODE) -> int:
    """A descriptor of ``path`` opened with ``flags``: a file made now has ``mode`` exactly
    from the start (no one else can open it for writing before its mode is set); one that
    exists is left as it is."""
    try:
        fd = os.open(str(path), flags | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        if flags & os.O_EXCL:
            raise
        return os.open(str(path), flags)
    try:
        os.fchmod(fd, mode)
    except OSError:
        os.close(fd)
        raise
    return fd


def write_atomic(path: Path, text: str, mode: int = FILE_MODE) -> None:
    # A name of its own: hosts that share the directory may write the same file at once.
    temporary = path.with_name(path.name + "." + os.urandom(4).hex() + ".tmp")
    fd = open_file(temporary, os.O_WRONLY | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        temporary.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def source_of(module: str) -> str:
    """The source of ``module`` (of this package), however it was loaded: from its file, or
    from the bundle the head sends (:mod:`ddptui.remote.programs`)."""
    spec = importlib.util.find_spec(module)
    loader = spec.loader if spec is not None else None
    source = loader.get_source(module) if isinstance(loader, InspectLoader) else None
    if source is None:
        raise ImportError(f"no source of {module}")
    return source
