"""One file of a node read whole within a cap, straight from this machine's disk where the
file is on a workdir it shares with the nodes (a Slurm job that has ended), and why a file could
not be read (:class:`UnreadableFile`, which a transport's own read raises too:
:meth:`~ddptui.remote.transport.Transport.read_file`)."""

from __future__ import annotations

import asyncio
import errno
import os
import stat

from ddptui.errors import DdptuiError


class UnreadableFile(DdptuiError):
    """Why the file could not be read (said after its path)."""


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
