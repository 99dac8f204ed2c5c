"""One file of a node, read whole within a cap: through the node's ``base64`` over its
transport (sessions carry text), or straight from this machine's disk where the file is on a
workdir it shares with the nodes (a Slurm job that has ended)."""

from __future__ import annotations

import asyncio
import base64
import errno
import os
import stat
from typing import TYPE_CHECKING

from ddptui.errors import DdptuiError
from ddptui.untrusted import plain

if TYPE_CHECKING:
    from ddptui.config.model import HostConfig
    from ddptui.remote.transport import Transport


class UnreadableFile(DdptuiError):
    """Why the file could not be read (said after its path)."""


async def read_remote(
    remote: Transport, host: HostConfig, path: str, *, max_bytes: int, timeout: float
) -> bytes:
    """``path`` on ``host``, at most ``max_bytes`` of it, through ``remote``."""
    result = await remote.run(
        host, ["base64", path], timeout=timeout, max_stdout=max_bytes * 4 // 3 + 4096
    )
    if result.reach is not None:
        raise UnreadableFile(plain(result.reach.detail, limit=500, one_line=True))
    if result.overflow is not None:
        raise UnreadableFile(f"it is larger than ddptui reads ({max_bytes:,} bytes)")
    if result.timed_out:
        raise UnreadableFile(f"it was not read in {timeout:g} s")
    if result.exit_status != 0:
        raise UnreadableFile("it cannot be read")
    try:
        data = base64.b64decode(result.stdout)
    except ValueError:
        raise UnreadableFile("it came garbled") from None
    if len(data) > max_bytes:
        raise UnreadableFile(f"it is larger than ddptui reads ({max_bytes:,} bytes)")
    return data


async def read_local(path: str, *, max_bytes: int) -> bytes:
    """``path`` on this machine, at most ``max_bytes`` of it: a regular file, never through a
    link (a node writes the shared workdir, and could point a run's file at the user's own)."""
    return await asyncio.to_thread(_read_local, path, max_bytes)


def _read_local(path: str, max_bytes: int) -> bytes:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UnreadableFile("it is a symbolic link, which ddptui does not follow") from None
        raise UnreadableFile(f"it cannot be read ({error.strerror})") from None
    with os.fdopen(descriptor, "rb") as handle:
        # A FIFO or a device would block or never end.
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise UnreadableFile("it is not a regular file")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnreadableFile(f"it is larger than ddptui reads ({max_bytes:,} bytes)")
    return data
