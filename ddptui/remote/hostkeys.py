"""known_hosts files: which keys are recorded for a host, on which line, and adding new ones.

Matching is asyncssh's own (hashed names, patterns, ``[host]:port``), so a key this module
calls known is exactly a key the connection will accept.
"""

from __future__ import annotations

import asyncio
import enum
import os
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from ddptui.config.model import HostConfig

DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
SYSTEM_KNOWN_HOSTS = (Path("/etc/ssh/ssh_known_hosts"),)
"""Read as well, never written: where cluster admins often record every node's key."""
SSH_PORT = 22


def known_hosts_path(host: HostConfig) -> Path:
    """The file ddptui records ``host``'s key in: its ``known_hosts`` or ``~/.ssh/known_hosts``."""
    return (host.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()


def read_known_hosts(host: HostConfig) -> KnownHosts:
    """Every key a connection to ``host`` trusts: its known_hosts file and the system-wide one,
    as OpenSSH reads UserKnownHostsFile and GlobalKnownHostsFile."""
    return KnownHosts.read(known_hosts_path(host), *SYSTEM_KNOWN_HOSTS)


def host_pattern(address: str, port: int) -> str:
    """How OpenSSH names a host in known_hosts: ``address``, or ``[address]:port`` off port 22."""
    return address if port == SSH_PORT else f"[{address}]:{port}"


def fingerprint(key: asyncssh.SSHKey) -> str:
    """``SHA256:…``, as ``ssh-keygen -lf`` and OpenSSH's prompts print it."""
    return key.get_fingerprint("sha256")


def key_line(address: str, port: int, key: asyncssh.SSHKey) -> str:
    """One known_hosts line (no newline) recording ``key`` for ``address:port``."""
    algorithm, blob = key.export_public_key("openssh").decode("ascii").split()[:2]
    return f"{host_pattern(address, port)} {algorithm} {blob}"


@dataclass(frozen=True)
class KnownKey:
    """A key recorded for a host, and the file and line that record it."""

    file: Path
    lineno: int
    key: asyncssh.SSHKey


class KnownHosts:
    """Parsed known_hosts files: ``path`` (the one ddptui writes) and read-only ``others``.

    A missing file is an empty one. Lines asyncssh cannot parse are skipped, as OpenSSH skips
    them, instead of making the whole file unusable.
    """

    def __init__(self, path: Path, text: str, others: Sequence[tuple[Path, str]] = ()) -> None:
        self.files = (path, *(file for file, _ in others))
        """Every file read, ``path`` first."""
        self._lines: list[tuple[Path, int, asyncssh.SSHKnownHosts]] = []
        usable: list[str] = []
        for file, content in ((path, text), *others):
            for lineno, line in enumerate(content.splitlines(), start=1):
                stripped = line.strip()
                if not stripped or stripped.startswith("#"):
                    continue
                try:
                    self._lines.append((file, lineno, asyncssh.import_known_hosts(stripped)))
                except (ValueError, asyncssh.KeyImportError):
                    continue
                usable.append(stripped)
        self.trusted = asyncssh.import_known_hosts("\n".join(usable))
        """Every usable line, for asyncssh's ``known_hosts=`` option."""

    @property
    def path(self) -> Path:
        """The file ddptui writes."""
        return self.files[0]

    @classmethod
    def read(cls, path: Path, *others: Path) -> KnownHosts:
        """``path`` missing is empty; of ``others``, only the files that exist are kept."""
        read_others = [(other, text) for other in others if (text := _read(other)) is not None]
        return cls(path, _read(path) or "", read_others)

    def keys_for(self, address: str, port: int, peer_ip: str | None = None) -> list[KnownKey]:
        """The keys a strict connection to ``address:port`` would accept, with their lines.

        ``peer_ip`` is the address the name resolved to: lines naming only the IP count too,
        as they do for asyncssh and OpenSSH.
        """
        match_port = None if port == SSH_PORT else port
        addr = peer_ip or ""
        # The whole-file match decides which keys count (a port-specific entry hides the
        # plain ones); the per-line matches only say where those keys are written.
        trusted = set(self.trusted.match(address, addr, match_port)[0])
        found: list[KnownKey] = []
        for file, lineno, line in self._lines:
            # A line naming both the host and its IP matches twice; it is one entry.
            keys = dict.fromkeys(line.match(address, addr, match_port)[0])
            found += [KnownKey(file, lineno, key) for key in keys if key in trusted]
        return found


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return None


def append_lines(path: Path, lines: Sequence[str]) -> None:
    """Append ``lines`` to a known_hosts file, creating it (0600) and its folder (0700)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as file:
        # A hand-edited file may lack its final newline; gluing a new entry onto the last
        # line would corrupt both.
        if file.tell() > 0 and not _ends_with_newline(path):
            file.write("\n")
        file.writelines(f"{line}\n" for line in lines)


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as file:
        file.seek(-1, os.SEEK_END)
        return file.read(1) == b"\n"


class KeyState(enum.Enum):
    TRUSTED = "trusted"
    UNKNOWN = "unknown"
    CHANGED = "changed"


@dataclass(frozen=True)
class HostKeyCheck:
    """What a host presents compared with what its known_hosts files record."""

    state: KeyState
    presented: asyncssh.SSHKey
    known: tuple[KnownKey, ...]
    searched: tuple[Path, ...]
    """Every file read: the one ddptui writes, then the system-wide ones that exist."""

    @property
    def file(self) -> Path:
        """Where ddptui records the key (``ddptui trust``)."""
        return self.searched[0]


async def resolve(address: str, port: int) -> str | None:
    """The first IP ``address`` resolves to, or None when it does not resolve."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    except OSError:
        return None
    return str(infos[0][4][0]) if infos else None


async def fetch_host_key(
    address: str, port: int, *, timeout: float, algorithms: Iterable[str] = ()
) -> asyncssh.SSHKey:
    """The host key ``address:port`` presents, optionally limited to ``algorithms``.

    Raises what connecting raises (``OSError``, ``asyncio.TimeoutError``, asyncssh errors).
    """
    key = await asyncio.wait_for(
        asyncssh.get_server_host_key(address, port, server_host_key_algs=list(algorithms) or ()),
        timeout,
    )
    if key is None:
        raise asyncssh.KeyExchangeFailed("the server presented no host key")
    return key


async def check_host_key(host: HostConfig, *, timeout: float) -> HostKeyCheck:
    """Fetch ``host``'s key and compare it with its known_hosts file.

    With keys on record, the key is fetched in their algorithms first, as a strict connection
    negotiates it; a host that no longer offers any of them has changed its key.
    """
    known_hosts = read_known_hosts(host)
    peer_ip = await resolve(host.address, host.port)
    known = tuple(known_hosts.keys_for(host.address, host.port, peer_ip))
    if not known:
        presented = await fetch_host_key(host.address, host.port, timeout=timeout)
        return HostKeyCheck(KeyState.UNKNOWN, presented, known, known_hosts.files)
    algorithms = [alg.decode("ascii") for entry in known for alg in entry.key.sig_algorithms]
    try:
        presented = await fetch_host_key(
            host.address, host.port, timeout=timeout, algorithms=algorithms
        )
    except asyncssh.KeyExchangeFailed:
        presented = await fetch_host_key(host.address, host.port, timeout=timeout)
    recorded = {entry.key for entry in known}
    state = KeyState.TRUSTED if presented in recorded else KeyState.CHANGED
    return HostKeyCheck(state, presented, known, known_hosts.files)
