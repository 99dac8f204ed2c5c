"""What every section of the probe shares: a section never raises. One that fails is recorded
as ``{"error": "…"}`` and the others still report."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

COMMAND_TIMEOUT_S = 10.0
"""How long one command the probe runs (``nvidia-smi``, ``ip``) may take."""


class SectionError(Exception):
    """A section's own explanation of why it has no value (shown as-is to the user)."""


def describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return type(exc).__name__ + (": " + text if text else "")


def section(collect: Callable[[], Any]) -> Any:
    try:
        return collect()
    except SectionError as exc:
        return {"error": str(exc)}
    except Exception as exc:
        return {"error": describe(exc)}


def maybe(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


def read_kept(path: Path, limit: int) -> tuple[bytes, os.stat_result]:
    """At most ``limit`` bytes of a file the probe keeps in the workdir, and the file's
    status, read without following a link and without waiting on a pipe: whoever else can
    write there could have put either, and the probe must neither hang nor read another
    file. Raises ``OSError``, or :class:`SectionError` for what is not a plain file."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as file:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise SectionError(f"{path} is not a file")
        return file.read(limit), found
