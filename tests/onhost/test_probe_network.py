"""The probe's network sections: node 0's address resolved on the host, within a deadline, each
address once in the resolver's order."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from pathlib import Path

import pytest

from ddptui.onhost import probe_network
from tests.helpers import recorded_torch, run_probe


@pytest.mark.parametrize(
    ("name", "resolves"),
    [("localhost", True), ("127.0.0.1", True), ("no-such-host.invalid", False)],
    ids=["name", "address", "unresolvable"],
)
def test_master_address_is_resolved_on_the_host(tmp_path: Path, name: str, resolves: bool) -> None:
    facts, elapsed = run_probe(
        tmp_path,
        python_path={"torch/__init__.py": recorded_torch()},
        extra_args=("--master-addr", name),
    )
    master = facts.master
    assert master is not None and master.name == name
    if resolves:
        assert ipaddress.ip_address("127.0.0.1") in master.addresses
        assert master.error == ""
    else:
        assert master.addresses == ()
        # The resolver's own answer, or the probe's deadline where DNS does not answer at all.
        assert master.error.startswith(("gaierror: ", "timed out after"))
    assert "master" not in facts.section_errors
    assert elapsed < probe_network.RESOLVE_TIMEOUT_S + 10


def test_without_master_address_there_is_no_lookup(tmp_path: Path) -> None:
    facts, _ = run_probe(tmp_path, python_path={"torch/__init__.py": recorded_torch()})
    assert facts.master is None


def test_a_stalled_resolver_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """getaddrinfo has no timeout; the probe gives up on it instead of hanging with it."""
    release = threading.Event()

    def stalled(*args: object) -> list[object]:
        release.wait(10)
        raise OSError("released")

    monkeypatch.setattr(probe_network, "RESOLVE_TIMEOUT_S", 0.2)
    monkeypatch.setattr(probe_network.socket, "getaddrinfo", stalled)
    started = time.monotonic()
    try:
        section = probe_network.Lookup("gpu-a").section()
    finally:
        release.set()
    assert time.monotonic() - started < 2
    assert section == {"name": "gpu-a", "error": "timed out after 0.2 s"}


def test_an_address_given_twice_is_listed_once_where_the_resolver_first_gave_it() -> None:
    answer = [
        (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", 0, 0, 0)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0)),
        (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", 0, 0, 0)),
    ]
    assert probe_network.unique_addresses(answer) == ["::1", "127.0.0.1"]
