"""known_hosts files: which keys are recorded for a host, on which line, and adding new ones.

Matching is asyncssh's own (hashed names, patterns, ``[host]:port``), so a key this module
calls known is exactly a key the connection will accept.
"""

from __future__ import annotations

import asyncio
import enum
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from ddptui.aio import wait_for
from ddptui.atomic import make_dirs, open_file

SYSTEM_KNOWN_HOSTS = (Path("/etc/ssh/ssh_known_hosts"), Path("/etc/ssh/ssh_known_hosts2"))
"""OpenSSH's default GlobalKnownHostsFile: read as well, never written; where cluster admins
often record every node's key."""
SSH_PORT = 22


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


PARSED_KEPT = 8
"""Sets of known_hosts files kept parsed, the latest used: a process reaches one cluster's
hosts, or a few."""


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
        """``path`` missing is empty; of ``others``, only the files that exist are kept.

        Files read before with the same contents are not parsed again: every host of a
        cluster reads the same files, and parsing all their lines for each of 128 hosts took
        most of a check's own time (a line a host: 16,384 lines parsed twice)."""
        read_others = tuple((other, text) for other in others if (text := _read(other)) is not None)
        text = _read(path) or ""
        key = (path, text, read_others)
        known = _PARSED.pop(key, None) or cls(path, text, read_others)
        _PARSED[key] = known
        while len(_PARSED) > PARSED_KEPT:
            del _PARSED[next(iter(_PARSED))]
        return known

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

    def revoked_for(
        self, address: str, port: int, peer_ip: str | None = None
    ) -> set[asyncssh.SSHKey]:
        """Keys marked ``@revoked`` for ``address:port``: never trusted, whatever else says.

        Both ``[address]:port`` and plain entries count. (asyncssh's own lookup drops the
        port-specific ones when no trusted key names the port, so the connection checks
        this set itself.)
        """
        names = [(address, peer_ip or "")]
        if port != SSH_PORT:
            # A bracketed name with no port looks up exactly the "[name]:port" entries.
            names += [(f"[{name}]:{port}", "") for name in (address, peer_ip) if name]
        return {key for name, addr in names for key in self.trusted.match(name, addr, None)[2]}

    def has_authority_for(self, address: str, port: int, peer_ip: str | None = None) -> bool:
        """Whether a ``@cert-authority`` line covers ``address:port``."""
        return bool(self._match(address, port, peer_ip)[1])

    def _match(self, address: str, port: int, peer_ip: str | None) -> tuple[Any, ...]:
        return tuple(self.trusted.match(address, peer_ip or "", None if port == SSH_PORT else port))


_PARSED: dict[tuple[Path, str, tuple[tuple[Path, str], ...]], KnownHosts] = {}
"""Parsed known_hosts files by their paths and contents, the latest used last. A
:class:`KnownHosts` is never changed once made, so hosts may share one."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return None


def append_lines(path: Path, lines: Sequence[str]) -> None:
    """Append ``lines`` to a known_hosts file, creating it (0600) and its folder (0700)."""
    make_dirs(path.parent)
    fd = open_file(path, os.O_WRONLY | os.O_APPEND)
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
    REVOKED = "revoked"
    """Marked ``@revoked``: the connection refuses it and ``ddptui trust`` never records it."""


@dataclass(frozen=True)
class HostKeyCheck:
    """What a host presents compared with what its known_hosts files record."""

    state: KeyState
    presented: asyncssh.SSHKey
    known: tuple[KnownKey, ...]
    searched: tuple[Path, ...]
    """Every file read: the one ddptui writes, then the others that exist."""
    by_authority: bool = False
    """Trusted because a ``@cert-authority`` signed the host's certificate."""

    @property
    def file(self) -> Path:
        """Where ddptui records the key (``ddptui trust``)."""
        return self.searched[0]


async def resolve(address: str, port: int, *, timeout: float = 10.0) -> str | None:
    """The first IP ``address`` resolves to, or None when it does not resolve (in time)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await wait_for(loop.getaddrinfo(address, port, type=socket.SOCK_STREAM), timeout)
    except (OSError, asyncio.TimeoutError):  # one class from Python 3.11 on, two before
        return None
    return str(infos[0][4][0]) if infos else None
