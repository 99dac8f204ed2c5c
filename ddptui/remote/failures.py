"""Why a connection failed, as a per-host :class:`Reachability` instead of an exception."""

from __future__ import annotations

import asyncio
import errno
import socket
from pathlib import Path

import asyncssh
from asyncssh.public_key import decode_ssh_public_key

from ddptui.config.model import HostConfig
from ddptui.remote.hostkeys import HostKeyCheck, KeyState, fingerprint, host_pattern
from ddptui.remote.status import TRUST_ADVICE, Reach, Reachability
from ddptui.untrusted import plain

NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.TimeoutError,
    asyncssh.Error,
)
"""What connecting to a host can raise that is the host's problem, not a bug of ours."""

REASON_LIMIT = 300
"""Characters kept of a reason a host gave (a disconnect message, an error text)."""


def where(host: HostConfig) -> str:
    return f"{host.name} ({host_pattern(host.address, host.port)})"


def network_failure(host: HostConfig, error: BaseException, timeout: float) -> Reachability:
    """Classify a failed TCP connect or SSH handshake (not host keys or auth: see below)."""
    if isinstance(error, socket.gaierror):
        return Reachability(
            Reach.DNS_FAILED, f"{host.address} does not resolve: {error.strerror or error}"
        )
    if isinstance(error, ConnectionRefusedError):
        return Reachability(
            Reach.REFUSED,
            f"{where(host)} refused the connection: is sshd running and listening on "
            f"port {host.port}?",
        )
    # A cut link or a dead machine: either nothing answers, or ARP gives up (about 3 s) and
    # the kernel reports no route. Both mean the host is not answering; only the first took the
    # whole timeout.
    if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        return Reachability(
            Reach.TIMEOUT,
            f"{where(host)} did not answer within {timeout:g} s: is it up and reachable?",
        )
    if isinstance(error, OSError) and error.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return Reachability(
            Reach.TIMEOUT,
            f"{where(host)} cannot be reached ({error.strerror or 'no route to host'}): is it "
            "up, and is its address right?",
        )
    if isinstance(error, asyncssh.DisconnectError):
        # The server chose this text, before authentication: anyone who can answer on the
        # address can put escape sequences in it.
        return Reachability(
            Reach.ERROR, f"{where(host)} closed the SSH session: {remote_reason(error.reason)}"
        )
    return Reachability(Reach.ERROR, f"{where(host)}: {remote_reason(str(error))}")


def remote_reason(text: str) -> str:
    """A reason a host sent (or an error that may quote one), safe to show on one line."""
    return plain(text, limit=REASON_LIMIT, one_line=True)


def host_key_failure(host: HostConfig, check: HostKeyCheck) -> Reachability:
    """The verdict on a host key a strict connection refused."""
    presented = f"{check.presented.get_algorithm()} {fingerprint(check.presented)}"
    if check.state is KeyState.UNKNOWN:
        searched = " or ".join(str(file) for file in check.searched)
        return Reachability(
            Reach.HOSTKEY_UNKNOWN,
            f"the host key of {where(host)} is not in {searched} ({presented}){TRUST_ADVICE}",
        )
    if check.state is KeyState.CHANGED:
        by_file: dict[Path, list[str]] = {}
        for entry in check.known:
            by_file.setdefault(entry.file, []).append(str(entry.lineno))
        lines = " and ".join(
            f"line {', '.join(numbers)} from {file}" for file, numbers in by_file.items()
        )
        recorded = ", ".join(fingerprint(entry.key) for entry in check.known)
        return Reachability(
            Reach.HOSTKEY_CHANGED,
            f"REMOTE HOST KEY CHANGED for {where(host)}: possible man-in-the-middle attack! "
            f"It now presents {presented}; on record: {recorded}. "
            f"If you re-installed the host, remove the old {lines} "
            "and run `ddptui trust HOSTS`.",
        )
    if check.state is KeyState.REVOKED:
        searched = " or ".join(str(file) for file in check.searched)
        return Reachability(
            Reach.HOSTKEY_REVOKED,
            f"the host key of {where(host)} ({presented}) is marked @revoked in {searched}: "
            "it is never trusted; ask the host's administrator for its new key",
        )
    # The key matches after all: the file was edited between the connection and the check.
    return Reachability(
        Reach.ERROR, f"the host key of {where(host)} was refused, then matched: try again"
    )


def auth_failure(host: HostConfig, username: str, offered: list[str]) -> Reachability:
    """Key authentication rejected; the detail names every key that was tried."""
    if not offered:
        return Reachability(
            Reach.AUTH_FAILED,
            f"no key to offer {where(host)} as {username}: set identity_file, create "
            "~/.ssh/id_ed25519 or load a key into ssh-agent",
        )
    return Reachability(
        Reach.AUTH_FAILED,
        f"{where(host)} rejected {username} with key(s) {'; '.join(offered)}: is the public "
        f"key in ~{username}/.ssh/authorized_keys on the host?",
    )


def describe_key(keypair: asyncssh.SSHKeyPair, origin: str = "") -> str:
    """``COMMENT (ALG SHA256:…)``: a key as a user can recognise it."""
    public = decode_ssh_public_key(keypair.key_public_data)
    label = keypair.get_comment() or "(no comment)"
    return f"{origin}{label} ({public.get_algorithm()} {fingerprint(public)})"
