"""Commands on the channels of a live SSH connection, each bounded: the channel opened within
the connect timeout, the command within its own, its output kept up to its caps.

A command that overruns its time or a cap is hung up on (SIGKILL requested, the channel closed)
and what it sent up to then is kept. Which connection to use, and whether to keep it after a
command that left it spent, is the pool's (:mod:`~ddptui.remote.connection`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any, NamedTuple

import asyncssh

from ddptui.aio import wait_for
from ddptui.config.model import HostConfig
from ddptui.remote import failures
from ddptui.remote.commands import CommandResult, command_line
from ddptui.remote.status import Reach, Reachability
from ddptui.remote.stream import Capped, close_within, drain_both
from ddptui.remote.transport import (
    MAX_STDERR_BYTES,
    MAX_STDOUT_BYTES,
    Command,
    RemoteError,
)

RELAY_CHUNK = 1 << 20


class Stalled(RemoteError):
    """The host did not open a channel within the deadline."""


class Ran(NamedTuple):
    """A command's result, and whether its connection is spent: aborted (it did not open or
    close the channel in time) or lost, so that the next command must open another."""

    result: CommandResult
    spent: bool


async def open_channel(
    connection: asyncssh.SSHClientConnection, line: str, seconds: float, **options: Any
) -> asyncssh.SSHClientProcess[Any]:
    """A session running the command ``line``; raises :class:`Stalled` after ``seconds``."""
    try:
        return await wait_for(connection.create_process(line, **options), seconds)
    except asyncio.TimeoutError:
        raise Stalled(f"the host did not open a session within {seconds:g} s") from None


async def run_on(
    connection: asyncssh.SSHClientConnection,
    host: HostConfig,
    command: Command,
    *,
    open_timeout: float,
) -> Ran:
    """``command`` on a channel of its own on ``connection`` (to ``host``); never raises for
    the host's failures. ``open_timeout`` bounds opening the channel, and closing it."""
    line = command_line(command.argv, command.env)
    try:
        process = await open_channel(connection, line, open_timeout, encoding=None)
    except Stalled as stalled:
        # A connection that answers keepalives but not channel requests is no use for the
        # next command either: drop it, so the next one reconnects or fails the same way.
        connection.abort()
        reach = Reachability(Reach.ERROR, f"{failures.where(host)}: {stalled}")
        return Ran(CommandResult(None, "", reach.detail, reach=reach), spent=True)
    except (asyncssh.Error, OSError) as error:
        return _lost(connection, host, "", failures.remote_reason(str(error)))
    if command.input is not None:
        # A command may exit without reading its input (a missing interpreter does):
        # the input is then undeliverable, and its exit status is still what counts.
        with contextlib.suppress(asyncssh.Error, OSError):
            process.stdin.write(command.input.encode("utf-8"))
            process.stdin.write_eof()
    stdout, stderr = Capped(command.max_stdout, "stdout"), Capped(command.max_stderr, "stderr")
    try:
        await wait_for(_drain(process, stdout, stderr), command.timeout)
    except asyncio.TimeoutError:
        confirmed = await _hang_up(process, open_timeout)
        timed_out = CommandResult(None, stdout.text(), stderr.text(), timed_out=True)
        return Ran(timed_out, spent=not confirmed)
    except (asyncssh.Error, OSError) as error:
        return _lost(connection, host, stdout.text(), failures.remote_reason(str(error)))
    overflow = stdout.overflow or stderr.overflow
    if overflow is not None:
        confirmed = await _hang_up(process, open_timeout)
        overflowed = CommandResult(None, stdout.text(), stderr.text(), overflow=overflow)
        return Ran(overflowed, spent=not confirmed)
    confirmed = await close_within(process, open_timeout)
    if process.returncode is None:
        result, lost = _lost(connection, host, stdout.text(), stderr.text())
        return Ran(result, spent=lost or not confirmed)
    finished = CommandResult(process.returncode, stdout.text(), stderr.text())
    return Ran(finished, spent=not confirmed)


async def relay(
    source: HostConfig,
    sending: asyncssh.SSHClientConnection,
    source_argv: Sequence[str],
    target: HostConfig,
    receiving: asyncssh.SSHClientConnection,
    target_argv: Sequence[str],
    *,
    open_timeout: float,
    timeout: float,
) -> CommandResult:
    """What ``source_argv`` writes on ``source`` piped into ``target_argv``'s stdin on
    ``target`` through this machine; see :meth:`~ddptui.remote.connection.RemoteCluster.relay`.
    """
    copying = f"copying from {source.name} to {target.name}"
    try:
        sender = await open_channel(sending, command_line(source_argv), open_timeout, encoding=None)
        receiver = await open_channel(
            receiving, command_line(target_argv), open_timeout, encoding=None
        )
    except (asyncssh.Error, OSError, Stalled) as error:
        raise RemoteError(f"{copying}: {failures.remote_reason(str(error))}") from None
    stdout, stderr = Capped(MAX_STDOUT_BYTES, "stdout"), Capped(MAX_STDERR_BYTES, "stderr")

    async def pipe() -> None:
        while chunk := await sender.stdout.read(RELAY_CHUNK):
            receiver.stdin.write(chunk)
            await receiver.stdin.drain()
        receiver.stdin.write_eof()
        await _drain(receiver, stdout, stderr)
        await sender.wait_closed()
        await receiver.wait_closed()

    try:
        await wait_for(pipe(), timeout)
    except asyncio.TimeoutError:
        raise RemoteError(f"{copying} took over {timeout:g} s") from None
    except (asyncssh.Error, OSError) as error:
        raise RemoteError(f"{copying}: {failures.remote_reason(str(error))}") from None
    finally:
        sender.close()
        receiver.close()
    if sender.returncode != 0:
        return CommandResult(sender.returncode, "", f"{source.name}: the source failed")
    return CommandResult(receiver.returncode, stdout.text(), stderr.text())


async def _hang_up(process: asyncssh.SSHClientProcess[bytes], seconds: float) -> bool:
    """Whether the host confirmed the channel's close within ``seconds``."""
    # SIGKILL is delivered by OpenSSH only to non-root logins; for root the command is
    # left to die of SIGPIPE on its next write to the closed channel.
    with contextlib.suppress(asyncssh.Error, OSError):
        process.send_signal("KILL")
    return await close_within(process, seconds)


def _lost(
    connection: asyncssh.SSHClientConnection, host: HostConfig, stdout: str, stderr: str
) -> Ran:
    reach = Reachability(Reach.ERROR, f"connection to {failures.where(host)} lost")
    lost = CommandResult(None, stdout, stderr or reach.detail, reach=reach)
    return Ran(lost, spent=connection.is_closed())


async def _drain(process: asyncssh.SSHClientProcess[bytes], stdout: Capped, stderr: Capped) -> None:
    await drain_both(process.stdout, process.stderr, stdout, stderr)
