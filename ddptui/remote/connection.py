"""One reused SSH connection per host, opened with OpenSSH's BatchMode manners.

Key authentication only (never a password or keyboard-interactive prompt), strict host keys,
``~/.ssh/config`` and the agent honoured, an explicit connect timeout and keepalive, and a cap
on concurrent handshakes. Every way a connection can fail comes back as a
:class:`~ddptui.remote.status.Reachability`, not an exception.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import asyncssh

from ddptui.config.model import HostConfig
from ddptui.errors import DdptuiError
from ddptui.remote import failures
from ddptui.remote.commands import CommandResult, command_line
from ddptui.remote.hostkeys import (
    KeyState,
    KnownHosts,
    check_host_key,
    read_known_hosts,
    resolve,
)
from ddptui.remote.status import Reach, Reachability

SSH_CONFIG = Path("~/.ssh/config")


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

    def __init__(self, host: HostConfig, process: asyncssh.SSHClientProcess[str]) -> None:
        self.host = host
        self._process = process

    async def lines(self) -> AsyncIterator[str]:
        """Output lines (``\n``-terminated) until the command or the connection ends."""
        async for line in self._process.stdout:
            if not line:  # asyncssh's end-of-stream marker
                return
            yield line.replace("\r\n", "\n")

    @property
    def exit_status(self) -> int | None:
        """Like :attr:`CommandResult.exit_status`: None while running or when unknown."""
        return self._process.returncode

    async def close(self) -> None:
        """Hang up: the remote command gets SIGHUP unless it ignores it or already exited."""
        self._process.close()
        await self._process.wait_closed()


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

    async def __aenter__(self) -> RemoteCluster:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

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
    ) -> CommandResult:
        """Run ``argv`` on ``host`` and wait for it (connecting first if needed).

        ``exit_status`` is the remote status (negative: killed by that signal), or None when
        it is unknown: no connection or a dropped one (``reach`` says why), or ``timed_out``
        (the channel is then closed and SIGKILL requested; see the note in the code: the
        command may outlive its timeout on root logins). Never raises for connection failures.
        """
        reach, connection = await self._connection(host)
        if connection is None:
            return CommandResult(None, "", reach.detail, reach=reach)
        try:
            process = await connection.create_process(
                command_line(argv, env), input=input, encoding="utf-8", errors="replace"
            )
            try:
                completed = await process.wait(timeout=timeout)
            except asyncssh.TimeoutError as error:
                # Delivered by OpenSSH only to non-root logins; for root the command is left
                # to die of SIGPIPE on its next write to the closed channel.
                process.send_signal("KILL")
                process.close()
                return CommandResult(None, _text(error.stdout), _text(error.stderr), timed_out=True)
        except (asyncssh.Error, OSError) as error:
            return self._lost(host, "", f"{error}")
        if completed.returncode is None:
            return self._lost(host, _text(completed.stdout), _text(completed.stderr))
        return CommandResult(completed.returncode, _text(completed.stdout), _text(completed.stderr))

    async def start_process(
        self, host: HostConfig, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> RemoteProcess:
        """Start ``argv`` on ``host`` (see :class:`RemoteProcess`).

        Raises :class:`HostUnreachable`, or :class:`RemoteError` if it cannot be started.
        """
        connection = await self._require(host)
        try:
            process = await connection.create_process(
                command_line(argv, env), term_type="dumb", encoding="utf-8", errors="replace"
            )
        except (asyncssh.Error, OSError) as error:
            raise RemoteError(f"{failures.where(host)}: cannot start a command: {error}") from None
        return RemoteProcess(host, process)

    async def put_files(self, host: HostConfig, local_dir: Path, remote_dir: str) -> None:
        """Upload the tree under ``local_dir`` into ``remote_dir`` (created, with parents).

        ``remote_dir`` may start with ``~/``: the remote home. Raises :class:`RemoteError`.
        """
        connection = await self._require(host)
        try:
            root = await _expand_home(connection, remote_dir)
            async with connection.start_sftp_client() as sftp:
                await sftp.makedirs(root, exist_ok=True)
                for dirpath, dirnames, filenames in os.walk(local_dir):
                    relative = Path(dirpath).relative_to(local_dir).parts
                    target = posixpath.join(root, *relative)
                    for name in dirnames:
                        await sftp.makedirs(posixpath.join(target, name), exist_ok=True)
                    for name in filenames:
                        await sftp.put(str(Path(dirpath, name)), posixpath.join(target, name))
        except (asyncssh.Error, OSError) as error:
            raise RemoteError(
                f"uploading {local_dir} to {failures.where(host)}:{remote_dir} failed: {error}"
            ) from None

    async def close(self) -> None:
        """Close every connection and wait for them to go."""
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            connection.close()
        await asyncio.gather(*(connection.wait_closed() for connection in connections))

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
        known_hosts = read_known_hosts(host)
        try:
            options = await self._options(host, known_hosts)
        except (OSError, ValueError, asyncssh.Error) as error:
            what = f"identity_file {host.identity_file}" if host.identity_file else "SSH settings"
            return Reachability(Reach.AUTH_FAILED, f"cannot use {what}: {error}"), None
        try:
            connection = await asyncio.wait_for(
                asyncssh.connect(host.address, host.port, options=options, config=None),
                self.connect_timeout,
            )
        except asyncssh.HostKeyNotVerifiable:
            return await self._host_key_verdict(host), None
        except (asyncssh.KeyExchangeFailed, asyncssh.ConnectionLost) as error:
            return await self._key_exchange_failure(host, known_hosts, error), None
        except asyncssh.PermissionDenied:
            offered = await _offered_keys(host, options)
            return failures.auth_failure(host, options.username, offered), None
        except failures.NETWORK_ERRORS as error:
            return failures.network_failure(host, error, self.connect_timeout), None
        return Reachability(Reach.OK, _describe(connection)), connection

    async def _options(
        self, host: HostConfig, known_hosts: KnownHosts
    ) -> asyncssh.SSHClientConnectionOptions:
        config = SSH_CONFIG.expanduser()
        options: asyncssh.SSHClientConnectionOptions = (
            await asyncssh.SSHClientConnectionOptions.construct(
                host=host.address,
                port=host.port,
                # Explicit, so the host's Host/Match blocks are applied when building these options.
                config=[str(config)] if config.is_file() else [],
                username=host.user if host.user is not None else (),
                known_hosts=known_hosts.trusted,
                client_keys=[str(host.identity_file)] if host.identity_file is not None else (),
                # A passphrase-protected key file is skipped (its agent copy may still work)
                # instead of prompting or failing the whole connection.
                ignore_encrypted=True,
                # The BatchMode equivalent: no password or keyboard-interactive prompts.
                preferred_auth="publickey",
                connect_timeout=self.connect_timeout,
                keepalive_interval=self.keepalive_interval,
                keepalive_count_max=self.keepalive_count_max,
            )
        )
        return options

    async def _host_key_verdict(self, host: HostConfig) -> Reachability:
        try:
            check = await check_host_key(host, timeout=self.connect_timeout)
        except failures.NETWORK_ERRORS as error:
            return failures.network_failure(host, error, self.connect_timeout)
        return failures.host_key_failure(host, check)

    async def _key_exchange_failure(
        self, host: HostConfig, known_hosts: KnownHosts, error: asyncssh.Error
    ) -> Reachability:
        # Only the recorded key types are negotiated: a host that dropped them all fails
        # key exchange (or hangs up, depending on who notices first) instead of presenting
        # a different key. Fetching its key in any type tells the two apart.
        peer_ip = await resolve(host.address, host.port)
        if known_hosts.keys_for(host.address, host.port, peer_ip):
            try:
                check = await check_host_key(host, timeout=self.connect_timeout)
            except failures.NETWORK_ERRORS:
                pass
            else:
                if check.state is KeyState.CHANGED:
                    return failures.host_key_failure(host, check)
        return failures.network_failure(host, error, self.connect_timeout)

    def _lost(self, host: HostConfig, stdout: str, stderr: str) -> CommandResult:
        connection = self._connections.get(host.name)
        if connection is not None and connection.is_closed():
            del self._connections[host.name]
        reach = Reachability(Reach.ERROR, f"connection to {failures.where(host)} lost")
        return CommandResult(None, stdout, stderr or reach.detail, reach=reach)


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


async def _expand_home(connection: asyncssh.SSHClientConnection, remote_dir: str) -> str:
    # The remote shell's $HOME, which python_argv and the trainer's workdir use, rather than
    # the SFTP login directory: they differ when sshd sets HOME (SetEnv, PAM).
    if remote_dir != "~" and not remote_dir.startswith("~/"):
        return remote_dir
    result = await connection.run('printf %s "$HOME"', check=True, encoding="utf-8")
    return posixpath.join(_text(result.stdout), remote_dir[2:])


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode("utf-8", errors="replace")
    return output or ""
