"""Jump hosts, as ``ProxyJump`` in ``~/.ssh/config`` names them: each a host of its own.

asyncssh, left to follow ``ProxyJump`` itself, opens a connection to the jump host for every
host behind it, reads none of ``~/.ssh/config`` for the jump host (its ``HostName``,
``User``, ``Port``, ``IdentityFile``) and checks its key against asyncssh's defaults. 128
hosts behind one bastion were then 128 handshakes at it at once, past OpenSSH's
``MaxStartups`` (10:30:100), which drops the excess at random. Here a hop is a host like any
other: resolved from ``~/.ssh/config``, its key checked as ``ssh`` would check it, and (by
:class:`~ddptui.remote.connection.RemoteCluster`) connected once for every host behind it.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncssh

from ddptui.config.model import HostConfig
from ddptui.remote.target import ssh_config_files

MAX_HOPS = 8
"""Hops a host is reached through at most, jump hosts' own ``ProxyJump`` included: past it,
the configuration loops."""


@dataclass(frozen=True)
class Hop:
    """One hop of a ``ProxyJump``, as written: ``[user@]host[:port]``."""

    text: str
    address: str
    user: str | None
    port: int | None


def jump_hops(spec: str) -> list[Hop]:
    """``ProxyJump``'s hops (comma-separated), first to last."""
    hops = []
    for hop in spec.split(","):
        text = hop.strip()
        user, _, address = text.rpartition("@")
        port = None
        host, colon, number = address.rpartition(":")
        if colon and number.isdecimal() and not host.endswith(":"):
            address, port = host.strip("[]"), int(number)
        hops.append(Hop(text, address, user or None, port))
    return hops


async def hop_host(hop: Hop) -> HostConfig:
    """``hop`` as ``ssh HOP`` reaches it: its port, where the hop names none, from
    ``~/.ssh/config`` (a host's is the hosts file's); no identity file or known_hosts file of
    the hosts file's, so that ``~/.ssh/config`` and the user's known_hosts apply to it.

    Raises ``OSError``, ``ValueError`` or ``asyncssh.Error`` for a config that cannot be read.
    """
    port = hop.port
    if port is None:
        options = await asyncssh.SSHClientConnectionOptions.construct(
            host=hop.address,
            config=ssh_config_files(),
            username=hop.user if hop.user is not None else (),
            client_keys=None,
        )
        port = int(options.port)
    return HostConfig(name=hop.text, address=hop.address, port=port, user=hop.user)
