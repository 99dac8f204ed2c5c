"""One host as the connection and ``ddptui trust`` both see it.

Both build their SSH options here, so they agree by construction: ``~/.ssh/config`` applied
(``HostName``, ``Port``, ``ProxyJump``, ``HostKeyAlias``, ``UserKnownHostsFile``,
``GlobalKnownHostsFile``), the known_hosts files OpenSSH would read, and the name a host's key
is recorded under — ``HostKeyAlias``, else the real host name, as OpenSSH does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from ddptui.aio import wait_for
from ddptui.config.model import HostConfig
from ddptui.remote import hostkeys
from ddptui.remote.hostkeys import SSH_PORT, HostKeyCheck, KeyState, KnownHosts, key_line, resolve

SSH_CONFIG = Path("~/.ssh/config")
AES_GCM = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
USER_KNOWN_HOSTS = (Path("~/.ssh/known_hosts"), Path("~/.ssh/known_hosts2"))
"""OpenSSH's default UserKnownHostsFile: the first is the one written."""


@dataclass(frozen=True)
class SshTarget:
    """``host`` resolved: the options to connect with and where its key is kept."""

    host: HostConfig
    options: asyncssh.SSHClientConnectionOptions
    """Strict: trusts exactly ``known_hosts``."""
    known_hosts: KnownHosts
    key_name: str
    """The name known_hosts records the key under: HostKeyAlias, else HostName, else address."""
    key_port: int

    @property
    def address(self) -> str:
        """Where the TCP connection goes (the config's HostName, else the address)."""
        return str(self.options.host)

    def key_line(self, key: asyncssh.SSHKey) -> str:
        """The known_hosts line recording ``key`` for this host.

        Under a HostKeyAlias, OpenSSH records the alias without a port; asyncssh's lookup,
        which adds the port, falls back to such a plain entry.
        """
        port = SSH_PORT if self.options.host_key_alias else self.key_port
        return key_line(self.key_name, port, key)


@dataclass(frozen=True)
class Keepalive:
    """How an SSH link is kept and judged lost: a keepalive every ``interval_s``, the link
    dropped after ``count_max`` unanswered."""

    interval_s: float = 15.0
    count_max: int = 3


KEEPALIVE = Keepalive()
"""A link's keepalives unless its user needs to know sooner (a follower does)."""


async def resolve_target(
    host: HostConfig,
    *,
    connect_timeout: float,
    keepalive_interval: float = 15.0,
    keepalive_count_max: int = 3,
    client_keys: bool = True,
) -> SshTarget:
    """Read ``~/.ssh/config`` and the known_hosts files for ``host``.

    ``client_keys=False`` leaves out the keys to log in with (fetching host keys needs none).
    Raises ``OSError``, ``ValueError`` or ``asyncssh.Error`` for settings that cannot be used
    (an unreadable identity file, a broken config).
    """
    if not client_keys:
        keys: object = None
    elif host.identity_file is not None:
        keys = [str(host.identity_file)]
    else:
        keys = ()
    base: asyncssh.SSHClientConnectionOptions = await asyncssh.SSHClientConnectionOptions.construct(
        host=host.address,
        port=host.port,
        config=ssh_config_files(),
        username=host.user if host.user is not None else (),
        client_keys=keys,
        # A passphrase-protected key file is skipped (its agent copy may still work)
        # instead of prompting or failing the whole connection.
        ignore_encrypted=True,
        # The BatchMode equivalent: no password or keyboard-interactive prompts.
        preferred_auth="publickey",
        connect_timeout=connect_timeout,
        keepalive_interval=keepalive_interval,
        keepalive_count_max=keepalive_count_max,
    )
    known_hosts = KnownHosts.read(*_user_files(host, base), *_global_files(base))
    # A user's Ciphers stand; else AES-GCM first: asyncssh's ChaCha20-Poly1305 makes two
    # cipher contexts a packet in Python, and a check's many short sessions to 128 hosts spent
    # a sixth of their time on it (the hosts' OpenSSH does AES-GCM in hardware).
    ciphers = () if base.config.get("Ciphers") else preferred_ciphers()
    options: asyncssh.SSHClientConnectionOptions = (
        await asyncssh.SSHClientConnectionOptions.construct(
            base, known_hosts=known_hosts.trusted, encryption_algs=ciphers, **_keys_as_loaded(base)
        )
    )
    key_name = options.host_key_alias or str(options.host)
    return SshTarget(host, options, known_hosts, key_name, int(options.port))


def ssh_config_files() -> list[str]:
    """``~/.ssh/config`` when there is one, for asyncssh's ``config=``: named explicitly, so
    that a host's Host and Match blocks apply when its options are built."""
    config = SSH_CONFIG.expanduser()
    return [str(config)] if config.is_file() else []


def _keys_as_loaded(base: asyncssh.SSHClientConnectionOptions) -> dict[str, object]:
    """The keys ``base`` loaded, for the options made from it: asyncssh makes options anew
    from the options it is given (here, and again in ``asyncssh.connect``), and each time it
    read and decoded every key file again, a fifth of a check's time at 128 hosts.

    Nothing is passed where the loaded keys would not stand for the files: no key loaded (an
    empty list means the default keys), or IdentitiesOnly with none to name (an empty list of
    agent identities means no agent key, None every one). The certificates are already on
    the keys: matched again, a key kept without its certificate would get it too.
    """
    if not base.client_keys or base.agent_identities == []:
        return {}
    return {
        "client_keys": list(base.client_keys),
        "client_certs": [],
        "agent_identities": base.agent_identities,
    }


def preferred_ciphers() -> list[str]:
    """asyncssh's ciphers, AES-GCM first, none left out."""
    available = [alg.decode("ascii") for alg in asyncssh.encryption.get_default_encryption_algs()]
    first = [alg for alg in AES_GCM if alg in available]
    return first + [alg for alg in available if alg not in first]


def _user_files(host: HostConfig, options: asyncssh.SSHClientConnectionOptions) -> list[Path]:
    # The hosts file's known_hosts wins, as `ssh -o UserKnownHostsFile=…` does over the config.
    if host.known_hosts is not None:
        return [host.known_hosts.expanduser()]
    configured = _configured_files(options, "UserKnownHostsFile")
    return configured or [path.expanduser() for path in USER_KNOWN_HOSTS]


def _global_files(options: asyncssh.SSHClientConnectionOptions) -> list[Path]:
    # Looked up on the module at call time: tests stand in their own system-wide files.
    return _configured_files(options, "GlobalKnownHostsFile") or list(hostkeys.SYSTEM_KNOWN_HOSTS)


def _configured_files(options: asyncssh.SSHClientConnectionOptions, key: str) -> list[Path]:
    values = options.config.get(key) or []
    assert isinstance(values, list)  # asyncssh parses these keys as lists of strings
    return [Path(value).expanduser() for value in values if value.lower() != "none"]


Tunnel = asyncssh.SSHClientConnection | None
"""The connection to the last jump host a host is reached through (``ProxyJump``), or None
for a host reached directly (:mod:`ddptui.remote.jumps`)."""


def through(tunnel: Tunnel) -> asyncssh.SSHClientConnection | tuple[()]:
    """asyncssh's ``tunnel`` argument for ``tunnel`` (``()``: the options' own). A target's
    options may name its ``ProxyJump``: a connection made from them goes through the jump
    hosts' shared connection, never asyncssh's own (:mod:`ddptui.remote.jumps` says why)."""
    return () if tunnel is None else tunnel


def jump_spec(target: SshTarget) -> str | None:
    """The ``ProxyJump`` that ``~/.ssh/config`` gives ``target``, if any."""
    tunnel = target.options.tunnel
    return tunnel if isinstance(tunnel, str) and tunnel else None


async def fetch_host_key(
    target: SshTarget, *, timeout: float, algorithms: Iterable[str] = (), tunnel: Tunnel = None
) -> asyncssh.SSHKey:
    """The host key ``target`` presents, optionally limited to ``algorithms``, reached as the
    connection reaches it (HostName, Port, through ``tunnel``).

    Raises what connecting raises (``OSError``, ``asyncio.TimeoutError``, asyncssh errors).
    """
    key = await wait_for(
        asyncssh.get_server_host_key(
            target.host.address,
            target.host.port,
            options=target.options,
            config=None,
            server_host_key_algs=list(algorithms) or (),
            tunnel=through(tunnel),
        ),
        timeout,
    )
    if key is None:
        raise asyncssh.KeyExchangeFailed("the server presented no host key")
    return key


async def check_host_key(
    target: SshTarget, *, timeout: float, tunnel: Tunnel = None
) -> HostKeyCheck:
    """Fetch ``target``'s key and compare it with its known_hosts files.

    A key marked ``@revoked`` is :attr:`KeyState.REVOKED` whatever else is recorded. A host
    covered by a ``@cert-authority`` line is trusted when a strict key exchange accepts its
    certificate. With keys on record, the key is fetched in their algorithms first, as a
    strict connection negotiates it; a host that no longer offers any of them has changed
    its key.
    """
    known_hosts = target.known_hosts
    peer_ip = await resolve(target.address, target.key_port, timeout=timeout)
    lookup = (target.key_name, target.key_port, peer_ip)
    known = tuple(known_hosts.keys_for(*lookup))
    revoked = known_hosts.revoked_for(*lookup)
    algorithms = [alg.decode("ascii") for entry in known for alg in entry.key.sig_algorithms]
    try:
        presented = await fetch_host_key(
            target, timeout=timeout, algorithms=algorithms, tunnel=tunnel
        )
    except (asyncssh.KeyExchangeFailed, asyncssh.ConnectionLost):
        # A host offering none of the recorded types fails key exchange, or hangs up,
        # depending on which side notices first.
        if not algorithms:
            raise
        presented = await fetch_host_key(target, timeout=timeout, tunnel=tunnel)
    if presented in revoked:
        return HostKeyCheck(KeyState.REVOKED, presented, known, known_hosts.files)
    if known_hosts.has_authority_for(*lookup) and await _accepted_strictly(target, timeout, tunnel):
        return HostKeyCheck(KeyState.TRUSTED, presented, known, known_hosts.files, True)
    if not known:
        return HostKeyCheck(KeyState.UNKNOWN, presented, known, known_hosts.files)
    recorded = {entry.key for entry in known}
    state = KeyState.TRUSTED if presented in recorded else KeyState.CHANGED
    return HostKeyCheck(state, presented, known, known_hosts.files)


async def _accepted_strictly(target: SshTarget, timeout: float, tunnel: Tunnel) -> bool:
    # A host certificate cannot be fetched and checked by hand (asyncssh hands back the bare
    # key), so let a strict handshake judge it, offering no key: getting as far as
    # authentication means the host key was accepted.
    try:
        connection = await wait_for(
            asyncssh.connect(
                target.host.address,
                target.host.port,
                options=target.options,
                config=None,
                client_keys=[],
                agent_path=None,
                tunnel=through(tunnel),
            ),
            timeout,
        )
    except asyncssh.HostKeyNotVerifiable:
        return False
    except asyncssh.PermissionDenied:
        return True
    connection.abort()
    return True
