"""One reused SSH connection per host, opened with OpenSSH's BatchMode manners.

Key authentication only (never a password or keyboard-interactive prompt), strict host keys,
``~/.ssh/config`` and the agent honoured, an explicit connect timeout and keepalive, and a cap
on concurrent handshakes. Every way a connection can fail comes back as a
:class:`~ddptui.remote.status.Reachability`, not an exception. What runs on a connection, and
within which bounds, is :mod:`~ddptui.remote.channel`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import asyncssh

from ddptui.aio import wait_for
from ddptui.config.model import MAX_PARALLEL_CONNECTS, Config, HostConfig
from ddptui.remote import channel, failures
from ddptui.remote.commands import CommandResult, command_line
from ddptui.remote.hostkeys import HostKeyCheck, KeyState, resolve
from ddptui.remote.jumps import MAX_HOPS, Hop, hop_host, jump_hops
from ddptui.remote.status import Reach, Reachability
from ddptui.remote.stream import RemoteProcess, RemoteStream, SendFailed
from ddptui.remote.target import (
    SshTarget,
    Tunnel,
    check_host_key,
    jump_spec,
    resolve_target,
    through,
)
from ddptui.remote.transport import Command, HostUnreachable, RemoteError, Transport


class RemoteCluster(Transport):
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
        max_parallel_connects: int = MAX_PARALLEL_CONNECTS,
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
        self._jumps: dict[str, asyncssh.SSHClientConnection] = {}
        """Each jump host's connection, by the chain of hops to it (``a``, ``a,b``): one for
        every host behind it (:mod:`ddptui.remote.jumps`)."""

    @classmethod
    def for_config(
        cls,
        config: Config,
        hosts: Sequence[HostConfig] | None = None,
        *,
        keepalive_interval: float = 15.0,
        keepalive_count_max: int = 3,
    ) -> RemoteCluster:
        """Connections to ``hosts`` (default: every host of ``config``, node 0 first, spares
        last) with the hosts file's timeout and handshake cap: the one place they are built
        from a config."""
        return cls(
            config.checked_hosts if hosts is None else hosts,
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

    async def connect(self, host: HostConfig) -> Reachability:
        """Connect to ``host``, or reuse its live connection. Never raises for network,
        authentication or host-key problems: they come back as the returned value."""
        reach, _ = await self._connection(host)
        return reach

    async def connect_all(self) -> dict[str, Reachability]:
        """Connect to every host concurrently; one dead host costs at most the timeout."""
        reaches = await asyncio.gather(*(self.connect(host) for host in self.hosts))
        return {host.name: reach for host, reach in zip(self.hosts, reaches, strict=True)}

    async def _execute(self, host: HostConfig, command: Command) -> CommandResult:
        """Connecting first if needed; opening the command's session is bounded by the connect
        timeout (see :func:`~ddptui.remote.channel.run_on`)."""
        reach, connection = await self._connection(host)
        if connection is None:
            return CommandResult(None, "", reach.detail, reach=reach)
        ran = await channel.run_on(connection, host, command, open_timeout=self.connect_timeout)
        if ran.spent:
            self._forget(host, connection)
        return ran.result

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
        return await channel.relay(
            source,
            sending,
            source_argv,
            target,
            receiving,
            target_argv,
            open_timeout=self.connect_timeout,
            timeout=timeout,
        )

    async def start_process(
        self, host: HostConfig, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> RemoteProcess:
        """Start ``argv`` on ``host`` (see :class:`~ddptui.remote.stream.RemoteProcess`).

        Raises :class:`HostUnreachable`, or :class:`RemoteError` if it cannot be started
        (within the connect timeout).
        """
        line = command_line(argv, env)
        process = await self._start(
            host, line, term_type="dumb", encoding="utf-8", errors="replace"
        )
        return RemoteProcess(host, process, close_timeout=self.connect_timeout)

    async def open_stream(
        self, host: HostConfig, argv: Sequence[str], *, input: str, max_line: int
    ) -> RemoteStream:
        """Start ``argv`` on ``host`` without a terminal, ``input`` on its stdin, and read its
        stdout as lines of at most ``max_line`` bytes (see
        :class:`~ddptui.remote.stream.RemoteStream`).

        Raises :class:`HostUnreachable`, or :class:`RemoteError` if it cannot be started.
        """
        process = await self._start(host, command_line(argv), input=input.encode(), encoding=None)
        return RemoteStream(host, process, max_line, close_timeout=self.connect_timeout)

    async def open_session(
        self, host: HostConfig, argv: Sequence[str], *, input: bytes, max_line: int
    ) -> RemoteStream:
        process = await self._start(host, command_line(argv), encoding=None)
        stream = RemoteStream(host, process, max_line, close_timeout=self.connect_timeout)
        try:
            await stream.send(input)
        except SendFailed as error:
            await stream.close()
            reason = failures.remote_reason(str(error))
            raise RemoteError(f"{failures.where(host)}: cannot start a command: {reason}") from None
        return stream

    async def close(self) -> None:
        """Close every connection and wait (at most the connect timeout) for them to go; any
        still there then is aborted."""
        # The hosts first: closing a jump host's connection cuts those behind it short.
        for connections in (self._connections, self._jumps):
            closing = list(connections.values())
            connections.clear()
            await self._close_all(closing)

    async def _close_all(self, connections: list[asyncssh.SSHClientConnection]) -> None:
        for connection in connections:
            connection.close()
        waits = asyncio.gather(*(connection.wait_closed() for connection in connections))
        try:
            await wait_for(waits, self.connect_timeout)
        except asyncio.TimeoutError:
            for connection in connections:
                connection.abort()

    async def _start(
        self, host: HostConfig, line: str, **options: Any
    ) -> asyncssh.SSHClientProcess[Any]:
        connection = await self._require(host)
        try:
            return await channel.open_channel(connection, line, self.connect_timeout, **options)
        except (asyncssh.Error, OSError, channel.Stalled) as error:
            reason = failures.remote_reason(str(error))
            raise RemoteError(f"{failures.where(host)}: cannot start a command: {reason}") from None

    def _forget(self, host: HostConfig, connection: asyncssh.SSHClientConnection) -> None:
        """Forget a spent connection at once, so the next command opens another."""
        if self._connections.get(host.name) is connection:
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
        self, host: HostConfig, *, tunnel: Tunnel = None, path: tuple[str, ...] = ()
    ) -> tuple[Reachability, asyncssh.SSHClientConnection | None]:
        """A connection to ``host``: through ``tunnel`` when given, else through the jump
        hosts its ``ProxyJump`` names, if any (``path``: the jump hosts being connected on
        the way here, a jump host's own ``ProxyJump`` leading on)."""
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
        spec = jump_spec(target)
        if tunnel is None and spec is not None:
            reach, tunnel = await self.jump(spec, path=path)
            if tunnel is None:
                return reach, None
        options = target.options
        try:
            connection = await wait_for(
                asyncssh.connect(
                    host.address, host.port, options=options, config=None, tunnel=through(tunnel)
                ),
                self.connect_timeout,
            )
        except asyncssh.HostKeyNotVerifiable:
            return await self._host_key_verdict(target, tunnel), None
        except (asyncssh.KeyExchangeFailed, asyncssh.ConnectionLost) as error:
            return await self._key_exchange_failure(target, error, tunnel), None
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

    async def jump(
        self, spec: str, *, path: tuple[str, ...] = ()
    ) -> tuple[Reachability, asyncssh.SSHClientConnection | None]:
        """The connection to the last jump host of ``spec`` (a ``ProxyJump``), each hop
        reached through the one before it and connected once for every host behind it; or
        why a hop could not be reached, naming it."""
        chain: list[str] = []
        tunnel: Tunnel = None
        for hop in jump_hops(spec):
            if hop.text in path or len(path) >= MAX_HOPS:
                why = "ProxyJump in ~/.ssh/config loops" if hop.text in path else "too many hops"
                return Reachability(Reach.ERROR, f"jump host {hop.text}: {why}"), None
            chain.append(hop.text)
            path = (*path, hop.text)
            reach, tunnel = await self._hop(",".join(chain), hop, tunnel, path)
            if tunnel is None:
                detail = reach.detail.removeprefix(f"jump host {hop.text}: ")
                return Reachability(reach.reach, f"through jump host {hop.text}: {detail}"), None
        return Reachability(Reach.OK, f"through {spec}"), tunnel

    async def _hop(
        self, chain: str, hop: Hop, tunnel: Tunnel, path: tuple[str, ...]
    ) -> tuple[Reachability, asyncssh.SSHClientConnection | None]:
        lock = self._locks.setdefault(f"jump {chain}", asyncio.Lock())
        async with lock:
            connection = self._jumps.get(chain)
            if connection is not None and not connection.is_closed():
                return Reachability(Reach.OK, _describe(connection)), connection
            try:
                host = await hop_host(hop)
            except (OSError, ValueError, asyncssh.Error) as error:
                return Reachability(Reach.ERROR, f"cannot read its SSH settings: {error}"), None
            reach, connection = await self._open(host, tunnel=tunnel, path=path)
            if connection is not None:
                self._jumps[chain] = connection
            return reach, connection

    async def _host_key_verdict(self, target: SshTarget, tunnel: Tunnel) -> Reachability:
        try:
            check = await check_host_key(target, timeout=self.connect_timeout, tunnel=tunnel)
        except failures.NETWORK_ERRORS as error:
            return failures.network_failure(target.host, error, self.connect_timeout)
        return failures.host_key_failure(target.host, check)

    async def _key_exchange_failure(
        self, target: SshTarget, error: asyncssh.Error, tunnel: Tunnel
    ) -> Reachability:
        # Only the recorded key types are negotiated: a host that dropped them all fails
        # key exchange (or hangs up, depending on who notices first) instead of presenting
        # a different key. Fetching its key in any type tells the two apart.
        peer_ip = await resolve(target.address, target.key_port, timeout=self.connect_timeout)
        if target.known_hosts.keys_for(target.key_name, target.key_port, peer_ip):
            try:
                check = await check_host_key(target, timeout=self.connect_timeout, tunnel=tunnel)
            except failures.NETWORK_ERRORS:
                pass
            else:
                if check.state is KeyState.CHANGED:
                    return failures.host_key_failure(target.host, check)
        return failures.network_failure(target.host, error, self.connect_timeout)


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
