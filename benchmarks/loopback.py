"""SSH hosts on 127.0.0.1 for the benchmarks: the demo's servers (``ddptui/demo/sshd.py``: real
asyncssh, a host key each, key-only login, each on its own port), the client key and
known_hosts that reach them, and their hosts file. What a command ddptui sent them runs:
``tests.helpers.hostile_server.command_argv``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from ddptui.demo.cluster import hosts_toml
from ddptui.demo.sshd import LoopbackHost, LoopbackSshd, write_key_pair

Sshd = TypeVar("Sshd", bound=LoopbackSshd)


@dataclass(frozen=True)
class Loopback(Generic[Sshd]):
    servers: Sshd
    identity: Path
    known_hosts: Path

    def hosts_toml(self, hosts: Sequence[LoopbackHost], procs: int) -> str:
        """The hosts file that reaches ``hosts``, ``procs`` ranks on each."""
        return hosts_toml(self.servers.user, self.identity, self.known_hosts, hosts, procs)


@contextmanager
def loopback_hosts(
    root: Path, sshd: Callable[[Path, str], Sshd], names: Sequence[str]
) -> Iterator[Loopback[Sshd]]:
    """A host served for each of ``names`` by ``sshd`` (made from ``root``, where the hosts'
    homes go, and the client's public key), stopped on the way out."""
    client = root / "client"
    client.mkdir(mode=0o700)
    identity = client / "id_ed25519"
    servers = sshd(root, write_key_pair(identity, "ddptui-benchmark"))
    try:
        hosts = [servers.add_host(name) for name in names]
        known_hosts = client / "known_hosts"
        known_hosts.write_text("".join(host.known_hosts_line() + "\n" for host in hosts))
        yield Loopback(servers, identity, known_hosts)
    finally:
        servers.close()
