"""Long-lived remote commands read as bounded lines: of bytes (the run follower's channel), or of
text on a terminal; and closing a command's channel within a deadline."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Protocol

import asyncssh

from ddptui.aio import one_by_one, wait_for
from ddptui.config.model import HostConfig
from ddptui.remote.commands import Overflow

READ_CHUNK = 65536
MAX_LINE_CHARS = 64 * 1024
"""A :class:`RemoteProcess` line longer than this comes in pieces of this length."""


async def close_within(process: asyncssh.SSHClientProcess[Any], seconds: float) -> bool:
    """Close ``process``'s channel and wait at most ``seconds`` for the host to confirm; False
    when it did not, and its whole connection was aborted.

    A channel the host never closes must not hang whoever closes it, nor stay half-open on the
    head node (nor would the next command on that connection fare better).
    """
    process.close()
    try:
        await wait_for(process.wait_closed(), seconds)
    except asyncio.TimeoutError:
        connection = _connection(process)
        if connection is not None:
            connection.abort()
        # The abort's clean-up (a turn of the loop away) closes the channel, and once it has,
        # the connection reads as closed and is not reused; bounded all the same.
        with contextlib.suppress(asyncio.TimeoutError):
            await wait_for(process.wait_closed(), seconds)
        return False
    return True


def _connection(process: asyncssh.SSHClientProcess[Any]) -> asyncssh.SSHClientConnection | None:
    """The connection under ``process``'s channel; None once asyncssh has let go of it (a link
    cut while closing: the connection was lost and the channel cleaned up meanwhile)."""
    try:
        connection = process.channel.get_connection()
    except AssertionError:
        return None
    return connection if isinstance(connection, asyncssh.SSHClientConnection) else None


class _Reader(Protocol):
    async def read(self, n: int = -1, /) -> bytes: ...


class Capped:
    """One output stream of a command, kept up to ``limit`` bytes."""

    def __init__(self, limit: int, stream: str) -> None:
        self.limit = limit
        self.stream = stream
        self.data = bytearray()
        self.overflow: Overflow | None = None

    async def read_from(self, reader: _Reader) -> None:
        while chunk := await reader.read(READ_CHUNK):
            room = self.limit - len(self.data)
            self.data += chunk[:room]
            if len(chunk) > room:
                self.overflow = Overflow(self.stream, self.limit)
                return

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


async def drain_both(out: _Reader, err: _Reader, stdout: Capped, stderr: Capped) -> None:
    """Read a command's two streams to their end, or until one of them overflows."""
    readers = {
        asyncio.ensure_future(stdout.read_from(out)),
        asyncio.ensure_future(stderr.read_from(err)),
    }
    try:
        while readers:
            done, readers = await asyncio.wait(readers, return_when=asyncio.FIRST_COMPLETED)
            for reader in done:
                reader.result()
            if stdout.overflow or stderr.overflow:
                return
    finally:
        for reader in readers:
            reader.cancel()


class SendFailed(Exception):
    """A command's stdin could not be written: its channel is gone."""


class LineTooLong(Exception):
    """The host sent more than the allowed bytes without a newline."""


class LineStream:
    """A long-lived command's stdout read as bounded lines of bytes; what closes it is the
    transport's (an SSH channel, a local ``srun`` process)."""

    def __init__(self, host: HostConfig, stdout: _Reader, max_line: int) -> None:
        self.host = host
        self._stdout = stdout
        self._max_line = max_line

    def lines(self) -> AsyncGenerator[bytes, None]:
        """Complete stdout lines without their newline, one by one (:meth:`batches`)."""
        return one_by_one(self.batches())

    async def batches(self) -> AsyncGenerator[list[bytes], None]:
        """Complete stdout lines without their newline, as many as each read brought, until
        the command or channel ends: one hand-over for a read's lines, not one for each.

        Raises :class:`LineTooLong` if a line exceeds the cap: a host that does that is not
        running our follower, and reading on would hold its output in memory; and what the
        transport raises where the connection is lost (``asyncssh.Error``, ``OSError``).
        """
        pending = b""
        while True:
            chunk = await self._stdout.read(READ_CHUNK)
            if not chunk:
                return
            pending += chunk
            end = pending.rfind(b"\n")
            if end >= 0:
                whole = pending[:end].split(b"\n")
                pending = pending[end + 1 :]
                yield whole
            if len(pending) > self._max_line:
                raise LineTooLong(f"more than {self._max_line} bytes without a newline")

    @property
    def exit_status(self) -> int | None:
        raise NotImplementedError

    @property
    def why_ended(self) -> str:
        """What the command said of its end (the last line of its errors), or ""."""
        return ""

    async def close(self) -> None:
        raise NotImplementedError


class RemoteStream(LineStream):
    """A remote command without a terminal: stdout read as lines, stderr kept (capped).

    Closing the channel ends the command's output; a command that writes regularly then dies of
    a broken pipe, so nothing outlives the stream on the host.
    """

    def __init__(
        self,
        host: HostConfig,
        process: asyncssh.SSHClientProcess[bytes],
        max_line: int,
        *,
        close_timeout: float = 10.0,
    ) -> None:
        super().__init__(host, process.stdout, max_line)
        self._process = process
        self._close_timeout = close_timeout

    @property
    def exit_status(self) -> int | None:
        return self._process.returncode

    async def send(self, data: bytes) -> None:
        """Write ``data`` to the command's stdin (a session's, which stays open), waiting while
        the channel's window is full. Raises :class:`SendFailed` once the channel is gone."""
        try:
            self._process.stdin.write(data)
            await self._process.stdin.drain()
        except (asyncssh.Error, OSError, BrokenPipeError) as error:
            raise SendFailed(str(error) or type(error).__name__) from None

    async def close(self) -> None:
        """Close the channel; wait at most ``close_timeout`` for the host to confirm, then abort
        the connection (:func:`close_within`)."""
        with contextlib.suppress(asyncssh.Error, OSError):
            await close_within(self._process, self._close_timeout)


class RemoteProcess:
    """A long-lived remote command on a pseudo-terminal, read line by line as it writes.

    The terminal ties the command to the channel: closing it hangs up the terminal and the
    command gets SIGHUP. (SSH signal requests would not do: OpenSSH refuses them for root
    logins.) stdout and stderr arrive merged, as a terminal shows them.
    """

    def __init__(
        self,
        host: HostConfig,
        process: asyncssh.SSHClientProcess[str],
        *,
        close_timeout: float = 10.0,
    ) -> None:
        self.host = host
        self._process = process
        self._close_timeout = close_timeout

    async def lines(self) -> AsyncIterator[str]:
        """Output lines (``\n``-terminated) until the command ends; a lost connection raises
        (``asyncssh.Error``, ``OSError``).

        A line longer than :data:`MAX_LINE_CHARS` comes in pieces of that length, so a host
        that never sends a newline cannot grow one line without bound. Callers bound the
        wait for each line themselves.
        """
        pending = ""
        while chunk := await self._process.stdout.read(READ_CHUNK):
            *complete, pending = (pending + chunk).split("\n")
            for line in complete:
                yield line.removesuffix("\r") + "\n"
            while len(pending) >= MAX_LINE_CHARS:
                yield pending[:MAX_LINE_CHARS]
                pending = pending[MAX_LINE_CHARS:]
        if pending:
            yield pending

    @property
    def exit_status(self) -> int | None:
        """Like :attr:`~ddptui.remote.commands.CommandResult.exit_status`: None while running or
        when unknown."""
        return self._process.returncode

    async def close(self) -> None:
        """Hang up: the remote command gets SIGHUP unless it ignores it or already exited.

        Waits at most ``close_timeout`` for the host to confirm, then aborts the connection
        (:func:`close_within`)."""
        await close_within(self._process, self._close_timeout)
