"""How the runs layer reaches a node: what it asks of a transport, whichever it is.

Two transports serve it. :class:`~ddptui.remote.connection.RemoteCluster` reaches hosts over
SSH; :class:`~ddptui.remote.srun.SrunCluster` reaches the nodes of a Slurm job through ``srun``
steps from the login node, so a cluster that allows no SSH to its nodes is followed, asked and
signalled the same way. The node agent, the follower, the stopper and the supervisor above are
the same for both.
"""

from __future__ import annotations

import base64
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ddptui.config.model import HostConfig
from ddptui.errors import DdptuiError
from ddptui.remote.commands import CommandResult, python_argv
from ddptui.remote.files import UnreadableFile
from ddptui.remote.status import Reachability
from ddptui.remote.stream import LineStream, RemoteStream
from ddptui.untrusted import plain

MAX_STDOUT_BYTES = 8 * 1024 * 1024
"""What :meth:`Transport.run` keeps of a command's stdout before ending it: a flooding host must
not fill the head node's memory."""
MAX_STDERR_BYTES = 256 * 1024


class RemoteError(DdptuiError):
    """A remote operation that cannot return a per-host value failed (uploads, processes)."""


class HostUnreachable(RemoteError):
    """No connection to the host; ``reachability`` says why."""

    def __init__(self, host: HostConfig, reachability: Reachability) -> None:
        super().__init__(reachability.detail)
        self.host = host
        self.reachability = reachability


@dataclass(frozen=True)
class Command:
    """One command to run and wait for, with its bounds (see :meth:`Transport.run`)."""

    argv: tuple[str, ...]
    input: str | None
    timeout: float
    env: Mapping[str, str] | None
    max_stdout: int
    max_stderr: int


class Transport(ABC):
    """Commands on a run's nodes: one at a time (:meth:`run`) or a long-lived stream."""

    def python(self, host: HostConfig, *args: str) -> list[str]:
        """The argv that runs the node's Python with ``args`` where this transport runs it
        (:func:`~ddptui.remote.commands.python_argv` unless it runs the node's commands
        elsewhere)."""
        return python_argv(host, *args)

    @abstractmethod
    async def connect(self, host: HostConfig) -> Reachability:
        """Whether ``host`` can be reached now (and why not); never raises for that."""

    async def run(
        self,
        host: HostConfig,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float,
        env: Mapping[str, str] | None = None,
        max_stdout: int = MAX_STDOUT_BYTES,
        max_stderr: int = MAX_STDERR_BYTES,
    ) -> CommandResult:
        """Run ``argv`` on ``host`` with ``input`` (if any) on its stdin and ``env`` added to its
        environment, and wait for it.

        ``exit_status`` is the command's status (negative: killed by that signal), or None when
        it is unknown: the host could not be reached or was lost (``reach`` says why),
        ``timed_out`` (it ran past ``timeout`` seconds), or ``overflow`` (more than
        ``max_stdout`` / ``max_stderr`` bytes on that stream). A command that timed out or
        overflowed is ended; what it sent up to then is kept. Never raises for the host's
        failures.
        """
        command = Command(tuple(argv), input, timeout, env, max_stdout, max_stderr)
        return await self._execute(host, command)

    @abstractmethod
    async def _execute(self, host: HostConfig, command: Command) -> CommandResult:
        """:meth:`run`'s work, with its arguments as one value."""

    @abstractmethod
    async def open_stream(
        self, host: HostConfig, argv: Sequence[str], *, input: str, max_line: int
    ) -> LineStream:
        """Start ``argv`` on ``host`` with ``input`` on its stdin; its stdout as bounded lines.
        Raises :class:`RemoteError` if it cannot be started."""

    async def open_session(
        self, host: HostConfig, argv: Sequence[str], *, input: bytes, max_line: int
    ) -> RemoteStream:
        """As :meth:`open_stream`, but ``input`` only starts its stdin, which stays open for
        :meth:`~ddptui.remote.stream.RemoteStream.send`. Raises :class:`RemoteError`, always
        here: only an SSH connection keeps such a session."""
        raise RemoteError(f"{host.name}: no session is kept through this transport")

    async def read_file(
        self, host: HostConfig, path: str, *, max_bytes: int, timeout: float
    ) -> bytes:
        """``path`` on ``host`` whole, at most ``max_bytes`` of it (through the node's own
        ``base64``). Raises :class:`~ddptui.remote.files.UnreadableFile`."""
        result = await self.run(
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

    @abstractmethod
    async def close(self) -> None:
        """Let go of everything this transport holds."""


class PerHost(Transport):
    """Each host of ``own`` through its own transport (a follower's open connection, say),
    every other through ``rest``. It closes none of them: each is its holder's to close."""

    def __init__(self, own: Mapping[str, Transport], rest: Transport) -> None:
        self._own = own
        self._rest = rest

    def _of(self, host: HostConfig) -> Transport:
        return self._own.get(host.name, self._rest)

    def python(self, host: HostConfig, *args: str) -> list[str]:
        return self._of(host).python(host, *args)

    async def connect(self, host: HostConfig) -> Reachability:
        return await self._of(host).connect(host)

    async def _execute(self, host: HostConfig, command: Command) -> CommandResult:
        return await self._of(host)._execute(host, command)

    async def open_stream(
        self, host: HostConfig, argv: Sequence[str], *, input: str, max_line: int
    ) -> LineStream:
        return await self._of(host).open_stream(host, argv, input=input, max_line=max_line)

    async def open_session(
        self, host: HostConfig, argv: Sequence[str], *, input: bytes, max_line: int
    ) -> RemoteStream:
        return await self._of(host).open_session(host, argv, input=input, max_line=max_line)

    async def read_file(
        self, host: HostConfig, path: str, *, max_bytes: int, timeout: float
    ) -> bytes:
        return await self._of(host).read_file(host, path, max_bytes=max_bytes, timeout=timeout)

    async def close(self) -> None:
        return None
