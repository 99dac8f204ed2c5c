"""Ed25519 keys for the test bed, generated in-process (no ssh-keygen fork per host)."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh


def write_key_pair(path: Path, comment: str) -> str:
    """Write an unencrypted ed25519 private key (mode 0600) and ``.pub``; return the public line."""
    key = asyncssh.generate_private_key("ssh-ed25519", comment=comment)
    write_private(path, key.export_private_key())
    public = key.export_public_key().decode().strip()
    path.with_name(path.name + ".pub").write_text(public + "\n")
    return public


def write_private(path: Path, data: bytes) -> None:
    # OpenSSH refuses private keys readable by others, so the mode is set at creation.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def public_key_of(path: Path) -> str:
    """The ``TYPE BASE64`` part of an OpenSSH public key file (no comment)."""
    kind, blob, *_ = path.with_name(path.name + ".pub").read_text().split()
    return f"{kind} {blob}"


def known_hosts_line(address: str, port: int, public_key: str) -> str:
    host = address if port == 22 else f"[{address}]:{port}"
    kind, blob, *_ = public_key.split()
    return f"{host} {kind} {blob}"
