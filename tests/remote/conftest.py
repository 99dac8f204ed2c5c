"""Hermetic SSH client settings for the remote-layer tests, and HostConfigs for the servers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.remote import hostkeys


@pytest.fixture(autouse=True)
def client_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty HOME with no agent: the machine's own ~/.ssh and ssh-agent never leak in."""
    home = tmp_path / "client-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    yield home


@pytest.fixture(autouse=True)
def system_known_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stands in for /etc/ssh/ssh_known_hosts (absent until a test writes it), so the
    machine's own file never leaks in."""
    path = tmp_path / "etc-ssh" / "ssh_known_hosts"
    monkeypatch.setattr(hostkeys, "SYSTEM_KNOWN_HOSTS", (path,))
    return path
