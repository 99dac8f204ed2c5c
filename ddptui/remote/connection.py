"""One reused SSH connection per host, opened with OpenSSH's BatchMode manners.

Key authentication only (never a password or keyboard-interactive prompt), strict host keys,
``~/.ssh/config`` and the agent honoured, an explicit connect timeout and keepalive, and a cap
on concurrent handshakes. Every way a connection can fail comes back as a
:class:`~ddptui.remote.status.Reachability`, not an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from types import TracebackType
from typing import TypeVar

import asyncssh

from ddptui.aio import wait_for
from ddptui.config.model import Config, HostConfig
from ddptui.errors import DdptuiError
from ddptui.remote import failures
from ddptui.remote.commands import CommandResult, command_line, python_argv
from ddptui.remote.files import read_remote
from ddptui.remote.hostkeys import HostKeyCheck, KeyState, resolve
from ddptui.remote.status import Reach, Reachability
from ddptui.remote.stream import Capped, RemoteStream, close_within, drain_both
from ddptui.remote.target import SshTarget, check_host_key, resolve_target

_T = TypeVar("_T")

MAX_STDOUT_BYTES = 8 * 1024 * 1024
"""What :meth:`RemoteCluster.run` keeps of a command's stdout before hanging up on it: a
flooding host must not fill the head node's memory."""
MAX_STDERR_BYTES = 256 * 1024
MAX_LINE_CHARS = 64 * 1024
"""A :class:`RemoteProcess` line longer than this comes in pieces of this length."""
_CHUNK = 65536


class RemoteError(DdptuiError):
    """A remote operation that cannot return a per-host value failed (uploads, processes)."""


class HostUnreachable(RemoteError):
    """No connection to the host; ``reachability`` says why."""

    def __init__(self, host: HostConfig, reachability: Reachability) -> None:
        super().__init__(reachability.detail)
        self.host = host
        self.reachability = reachability


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
        """Output lines (``\n``-terminated) until the command or the connection ends.

        A line longer than :data:`MAX_LINE_CHARS` comes in pieces of that length, so a host
        that never sends a newline cannot grow one line without bound. Callers bound the
        wait for each line themselves.
        """
        pending = ""
        while chunk := await self._process.stdout.read(_CHUNK):
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
        """Like :attr:`CommandResult.exit_status`: None while running or when unknown."""
        return self._process.returncode

    async def close(self) -> None:
        """Hang up: the remote command gets SIGHUP unless it ignores it or already exited.

        Waits at most ``close_timeout`` for the host to confirm, then aborts the connection
        (:func:`~ddptui.remote.stream.close_within`)."""
        await close_within(self._process, self._close_timeout)


class RemoteCluster:
    """An async context manager owning at most one SSH connection per host (by name).

    ``connect_timeout`` bounds each handshake (TCP, key exchange, authentication), not the
    wait for a free handshake slot: with more hosts than ``max_parallel_connects`` the
    handshakes run in waves.
    """

    def __init__(
        self,
        hosts: Sequence[HostConfig],
        *,
        connect_timeout: float,
        max_parallel_connects: int = 32,
        keepalive_interval: float = 15.0,
        keepalive_count_max: int = 3,
    ) -> None:
        self.hosts = tuple(hosts)
        self.connect_timeout = connect_timeout
        self.keepalive_interval = keepalive_interval
        self.keepalive_count_max = keepalive_count_max
        self._handshakes = asyncio.Semaphore(max_parallel_connects)
        self._connections: dict[str, asyncssh.SSHClientConnection] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    @classmethod
    def for_config(
        cls,
        config: Config,
        hosts: Sequence[HostConfig] | None = None,
        *,
        keepalive_interval: float = 15.0,
        keepalive_count_max: int = 3,
    ) -> RemoteCluster:
        """Connections to ``hosts`` (default: every host of ``config``, node 0 first) with the
        hosts file's timeout and handshake cap: the one place they are built from a config."""
        return cls(
            config.ordered_hosts if hosts is None else hosts,
            connect_timeout=config.cluster.connect_timeout,
            max_parallel_connects=config.cluster.max_parallel_connects,
            keepalive_interval=keepalive_interval,
            keepalive_count_max=keepalive_count_max,
        )

    async def __aenter__(self) -> RemoteCluster:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def python(self, host: HostConfig, *args: str) -> list[str]:
        """``host``'s Python with ``args`` (:func:`~ddptui.remote.commands.python_argv`)."""
        return python_argv(host, *args)

    async def connect(self, host: HostConfig) -> Reachability:
        """Connect to ``host``, or reuse its live connection. Never raises for network,
        authentication or host-key problems: they come back as the returned value."""
        reach, _ = await self._connection(host)
        return reach

    async def connect_all(self) -> dict[str, Reachability]:
        """Connect to every host concurrently; one dead host costs at most the timeout."""
        reaches = await asyncio.gather(*(self.connect(host) for host in self.hosts))
        return {host.name: reach for host, reach in zip(self.hosts, reaches, strict=True)}

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
        """Run ``argv`` on ``host`` and wait for it (connecting first if needed).

        ``exit_status`` is the remote status (negative: killed by that signal), or None when
        it is unknown: no connection or a dropped one (``reach`` says why), ``timed_out``, or
        ``overflow`` (more than ``max_stdout`` / ``max_stderr`` bytes on that stream). A timed
        out or overflowing command has its channel closed and SIGKILL requested (see the note
        in the code: it may outlive that on root logins); what it sent up to then is kept.
        Opening the session is bounded by the connect timeout, the rest by ``timeout``.
        Never raises for connection failures.
        """
        reach, connection = await self._connection(host)
        if connection is None:
            return CommandResult(None, "", reach.detail, reach=reach)
        try:
            process = await self._within(
                connection.create_process(command_line(argv, env), encoding=None),
                self.connect_timeout,
                "open a session",
            )
        except _Stalled as stalled:
            return self._stalled(host, connection, stalled)
        except (asyncssh.Error, OSError) as error:
            return self._lost(host, "", failures.remote_reason(str(error)))
        if input is not None:
            # A command may exit without reading its input (a missing interpreter does):
            # the input is then undeliverable, and its exit status is still what counts.
            with contextlib.suppress(asyncssh.Error, OSError):
                process.stdin.write(input.encode("utf-8"))
                process.stdin.write_eof()
        stdout, stderr = Capped(max_stdout, "stdout"), Capped(max_stderr, "stderr")
        try:
            await wait_for(_drain_both(process, stdout, stderr), timeout)
        except asyncio.TimeoutError:
            await self._hang_up(host, connection, process)
            return CommandResult(None, stdout.text(), stderr.text(), timed_out=True)
        except (asyncssh.Error, OSError) as error:
            return self._lost(host, stdout.text(), failures.remote_reason(str(error)))
        overflow = stdout.overflow or stderr.overflow
        if overflow is not None:
            await self._hang_up(host, connection, process)
            return CommandResult(None, stdout.text(), stderr.text(), overflow=overflow)
        await self._close(host, connection, process)
        if process.returncode is None:
            return self._lost(host, stdout.text(), stderr.text())
        return CommandResult(process.returncode, stdout.text(), stderr.text())

    async def relay(
        self,
        source: HostConfig,
        source_argv: Sequence[str],
        target: HostConfig,
        target_argv: Sequence[str],
        *,
        timeout: float,
    ) -> CommandResult:
        """Pipe what ``source_argv`` writes on ``source`` into ``target_argv``'s stdin on
        ``target``, through this machine (the hosts need no way to each other); the target
        command's result. The whole relay must finish within ``timeout`` seconds; the source's
        failure is the result's too. Raises :class:`RemoteError` (:class:`HostUnreachable`)."""
        sending = await self._require(source)
        receiving = await self._require(target)
        try:
            sender = await self._within(
                sending.create_process(command_line(source_argv), encoding=None),
                self.connect_timeout,
                "open a session",
            )
            receiver = await self._within(
                receiving.create_process(command_line(target_argv), encoding=None),
                self.connect_timeout,
                "open a session",
            )
        except (asyncssh.Error, OSError, _Stalled) as error:
            reason = failures.remote_reason(str(error))
            raise RemoteError(f"copying from {source.name} to {target.name}: {reason}") from None
        stdout, stderr = Capped(MAX_STDOUT_BYTES, "stdout"), Capped(MAX_STDERR_BYTES, "stderr")

        async def pipe() -> None:
            while chunk := await sender.stdout.read(RELAY_CHUNK):
                receiver.stdin.write(chunk)
                await receiver.stdin.drain()
            receiver.stdin.write_eof()
            await _drain_both(receiver, stdout, stderr)
            await sender.wait_closed()
            await receiver.wait_closed()

        try:
            await wait_for(pipe(), timeout)
        except asyncio.TimeoutError:
            raise RemoteError(
                f"copying from {source.name} to {target.name} took over {timeout:g} s"
            ) from None
        except (asyncssh.Error, OSError) as error:
            reason = failures.remote_reason(str(error))
            raise RemoteError(f"copying from {source.name} to {target.name}: {reason}") from None
        finally:
            sender.close()
            receiver.close()
        if sender.returncode != 0:
            return CommandResult(sender.returncode, "", f"{source.name}: the source failed")
        return CommandResult(receiver.returncode, stdout.text(), stderr.text())

    async def start_process(
        self, host: HostConfig, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> RemoteProcess:
        """Start ``argv`` on ``host`` (see :class:`RemoteProcess`).

        Raises :class:`HostUnreachable`, or :class:`RemoteError` if it cannot be started
        (within the connect timeout).
        """
        connection = await self._require(host)
        try:
            process = await self._within(
                connection.create_process(
                    command_line(argv, env), term_type="dumb", encoding="utf-8", errors="replace"
                ),
                self.connect_timeout,
                "open a session",
            )
        except (asyncssh.Error, OSError, _Stalled) as error:
            reason = failures.remote_reason(str(error))
            raise RemoteError(f"{failures.where(host)}: cannot start a command: {reason}") from None
        return RemoteProcess(host, process, close_timeout=self.connect_timeout)

    async def open_stream(
        self, host: HostConfig, argv: Sequence[str], *, input: str, max_line: int
    ) -> RemoteStream:
        """Start ``argv`` on ``host`` without a terminal, ``input`` on its stdin, and read its
        stdout as lines of at most ``max_line`` bytes (see :class:`RemoteStream`).

        Raises :class:`HostUnreachable`, or :class:`RemoteError` if it cannot be started.
        """
        connection = await self._require(host)
        try:
            process = await self._within(
                connection.create_process(command_line(argv), input=input.encode(), encoding=None),
                self.connect_timeout,
                "open a session",
            )
        except (asyncssh.Error, OSError, _Stalled) as error:
            reason = failures.remote_reason(str(error))
            raise RemoteError(f"{failures.where(host)}: cannot start a command: {reason}") from None
        return RemoteStream(host, process, max_line, close_timeout=self.connect_timeout)

    async def read_file(
        self, host: HostConfig, path: str, *, max_bytes: int, timeout: float
    ) -> bytes:
        """``path`` on ``host`` whole; raises :class:`~ddptui.remote.files.UnreadableFile`."""
        return await read_remote(self, host, path, max_bytes=max_bytes, timeout=timeout)

    async def close(self) -> None:
        """Close every connection and wait (at most the connect timeout) for them to go; any
        still there then is aborted."""
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            connection.close()
        waits = asyncio.gather(*(connection.wait_closed() for connection in connections))
        try:
            await wait_for(waits, self.connect_timeout)
        except asyncio.TimeoutError:
            for connection in connections:
                connection.abort()

    async def _within(self, awaitable: Awaitable[_T], seconds: float, what: str) -> _T:
        try:
            return await wait_for(awaitable, seconds)
        except asyncio.TimeoutError:
            raise _Stalled(f"the host did not {what} within {seconds:g} s") from None

    def _stalled(
        self, host: HostConfig, connection: asyncssh.SSHClientConnection, stalled: _Stalled
    ) -> CommandResult:
        # A connection that answers keepalives but not channel requests is no use for the
        # next command either: drop it, so the next one reconnects or fails the same way.
        connection.abort()
        self._connections.pop(host.name, None)
        reach = Reachability(Reach.ERROR, f"{failures.where(host)}: {stalled}")
        return CommandResult(None, "", reach.detail, reach=reach)

    async def _hang_up(
        self,
        host: HostConfig,
        connection: asyncssh.SSHClientConnection,
        process: asyncssh.SSHClientProcess[bytes],
    ) -> None:
        # SIGKILL is delivered by OpenSSH only to non-root logins; for root the command is
        # left to die of SIGPIPE on its next write to the closed channel.
        with contextlib.suppress(asyncssh.Error, OSError):
            process.send_signal("KILL")
        await self._close(host, connection, process)

    async def _close(
        self,
        host: HostConfig,
        connection: asyncssh.SSHClientConnection,
        process: asyncssh.SSHClientProcess[bytes],
    ) -> None:
        """Close a command's channel within the connect timeout; a connection aborted for not
        confirming it is forgotten at once, so the next command opens another."""
        confirmed = await close_within(process, self.connect_timeout)
        if not confirmed and self._connections.get(host.name) is connection:
            del self._connections[host.name]

    async def _require(self, host: HostConfig) -> asyncssh.SSHClientConnection:
        reach, connection = await self._connection(host)
        if connection is None:
            raise HostUnreachable(host, reach)
        return connection

    async def _connection(
        self, host: HostConfig
    ) -> tuple[Reachability, asyncssh.SSHClientConnection | None]:
        lock = self._locks.setdefault(host.name, asyncio.Lock())
        async with lock:
            connection = self._connections.get(host.name)
            if connection is not None and not connection.is_closed():
                return Reachability(Reach.OK, _describe(connection)), connection
            async with self._handshakes:
                reach, connection = await self._open(host)
            if connection is not None:
                self._connections[host.name] = connection
            return reach, connection

    async def _open(
        self, host: HostConfig
    ) -> tuple[Reachability, asyncssh.SSHClientConnection | None]:
        try:
            target = await resolve_target(
                host,
                connect_timeout=self.connect_timeout,
                keepalive_interval=self.keepalive_interval,
                keepalive_count_max=self.keepalive_count_max,
            )
        except (OSError, ValueError, asyncssh.Error) as error:
            what = f"identity_file {host.identity_file}" if host.identity_file else "SSH settings"
            return Reachability(Reach.KEY_UNUSABLE, f"cannot use {what}: {error}"), None
        options = target.options
        try:
            connection = await wait_for(
                asyncssh.connect(host.address, host.port, options=options, config=None),
                self.connect_timeout,
            )
        except asyncssh.HostKeyNotVerifiable:
            return await self._host_key_verdict(target), None
        except (asyncssh.KeyExchangeFailed, asyncssh.ConnectionLost) as error:
            return await self._key_exchange_failure(target, error), None
        except asyncssh.PermissionDenied:
            offered = await _offered_keys(host, options)
            return failures.auth_failure(host, options.username, offered), None
        except failures.NETWORK_ERRORS as error:
            return failures.network_failure(host, error, self.connect_timeout), None
        revoked = _revoked_verdict(target, connection)
        if revoked is not None:
            connection.abort()
            return revoked, None
        return Reachability(Reach.OK, _describe(connection)), connection

    async def _host_key_verdict(self, target: SshTarget) -> Reachability:
        try:
            check = await check_host_key(target, timeout=self.connect_timeout)
        except failures.NETWORK_ERRORS as error:
            return failures.network_failure(target.host, error, self.connect_timeout)
        return failures.host_key_failure(target.host, check)

    async def _key_exchange_failure(self, target: SshTarget, error: asyncssh.Error) -> Reachability:
        # Only the recorded key types are negotiated: a host that dropped them all fails
        # key exchange (or hangs up, depending on who notices first) instead of presenting
        # a different key. Fetching its key in any type tells the two apart.
        peer_ip = await resolve(target.address, target.key_port, timeout=self.connect_timeout)
        if target.known_hosts.keys_for(target.key_name, target.key_port, peer_ip):
            try:
                check = await check_host_key(target, timeout=self.connect_timeout)
            except failures.NETWORK_ERRORS:
                pass
            else:
                if check.state is KeyState.CHANGED:
                    return failures.host_key_failure(target.host, check)
        return failures.network_failure(target.host, error, self.connect_timeout)

    def _lost(self, host: HostConfig, stdout: str, stderr: str) -> CommandResult:
        connection = self._connections.get(host.name)
        if connection is not None and connection.is_closed():
            del self._connections[host.name]
        reach = Reachability(Reach.ERROR, f"connection to {failures.where(host)} lost")
        return CommandResult(None, stdout, stderr or reach.detail, reach=reach)


def _revoked_verdict(
    target: SshTarget, connection: asyncssh.SSHClientConnection
) -> Reachability | None:
    # asyncssh misses a port-specific @revoked line when a plain line trusts the same
    # key; a revoked key must never be used, so it is checked here as well.
    presented = connection.get_server_host_key()
    peer = connection.get_extra_info("peername")
    peer_ip = str(peer[0]) if peer else None
    if presented is None or presented not in target.known_hosts.revoked_for(
        target.key_name, target.key_port, peer_ip
    ):
        return None
    files = target.known_hosts.files
    check = HostKeyCheck(KeyState.REVOKED, presented, (), files)
    return failures.host_key_failure(target.host, check)


async def _offered_keys(
    host: HostConfig, options: asyncssh.SSHClientConnectionOptions
) -> list[str]:
    origin = f"{host.identity_file}: " if host.identity_file is not None else ""
    offered = [failures.describe_key(keypair, origin) for keypair in options.client_keys or ()]
    if host.identity_file is not None and not options.client_keys:
        offered.append(f"{host.identity_file} (skipped: passphrase-protected and not in the agent)")
    if options.agent_path:
        try:
            async with asyncssh.connect_agent(options.agent_path) as agent:
                agent_keys = await agent.get_keys()
        except (OSError, asyncssh.Error):
            agent_keys = []
        offered += [failures.describe_key(keypair, "agent: ") for keypair in agent_keys]
    return offered


def _describe(connection: asyncssh.SSHClientConnection) -> str:
    username = connection.get_extra_info("username")
    server = connection.get_extra_info("server_version")
    return f"connected as {username} ({server})"


RELAY_CHUNK = 1 << 20


class _Stalled(RemoteError):
    """A remote operation did not finish within its deadline."""


async def _drain_both(
    process: asyncssh.SSHClientProcess[bytes], stdout: Capped, stderr: Capped
) -> None:
    await drain_both(process.stdout, process.stderr, stdout, stderr)
