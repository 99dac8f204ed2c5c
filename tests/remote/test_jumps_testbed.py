"""Hosts behind a jump host (``ProxyJump`` in ``~/.ssh/config``) on the test bed: the jump host
reached as ``ssh`` reaches it (its ``HostName``, ``User``, ``IdentityFile`` and known_hosts
from the config), logged in to once for every host behind it, and trusted like any host."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from ddptui.cli import main
from ddptui.config.model import HostConfig
from ddptui.remote.connection import RemoteCluster
from ddptui.remote.hostkeys import KeyState
from ddptui.remote.status import Reach
from ddptui.remote.trust import lines_to_add, scan_host_keys
from tests.remote.hosts import bed_host
from tests.testbed import TestBed, TestHost

JUMP = "jumpbox"


def behind_jumpbox(bed: TestBed, home: Path, jump_known_hosts: Path) -> list[HostConfig]:
    """node1 to node3 behind node0, which the config knows only as ``jumpbox``."""
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    node0, behind = bed.hosts[0], bed.hosts[1:]
    (ssh / "config").write_text(
        f"Host {JUMP}\n"
        f"  HostName {node0.address}\n"
        f"  User {bed.user}\n"
        f"  IdentityFile {bed.identity_file}\n"
        f"  UserKnownHostsFile {jump_known_hosts}\n"
        f"Host {' '.join(host.address for host in behind)}\n"
        f"  ProxyJump {JUMP}\n"
    )
    return [bed_host(bed, host) for host in behind]


def logins(host: TestHost) -> list[str]:
    return [line for line in host.sshd_log.read_text().splitlines() if "Accepted publickey" in line]


def test_hosts_behind_a_jump_host_are_reached_through_one_login_to_it(
    testbed: TestBed, client_home: Path
) -> None:
    hosts = behind_jumpbox(testbed, client_home, testbed.known_hosts)
    before = {host.name: len(logins(host)) for host in testbed.hosts}

    async def scenario() -> tuple[list[Reach], list[str]]:
        async with RemoteCluster(hosts, connect_timeout=5) as remote:
            reaches = await remote.connect_all()
            ran = [await remote.run(host, ["hostname"], timeout=10) for host in hosts]
        return [reach.reach for reach in reaches.values()], [r.stdout.strip() for r in ran]

    reaches, names = asyncio.run(scenario())
    assert reaches == [Reach.OK] * 3
    node0, behind = testbed.hosts[0], testbed.hosts[1:]
    assert names == [host.hostname for host in behind]
    # One login to the jump host for all three; each host saw its login come from it.
    assert len(logins(node0)) - before[node0.name] == 1
    for host in behind:
        new = logins(host)[before[host.name] :]
        assert len(new) == 1 and f"from {node0.address} " in new[0], new


def test_the_check_runs_whole_on_hosts_behind_a_jump_host(
    testbed: TestBed, client_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    behind_jumpbox(testbed, client_home, testbed.known_hosts)
    hosts_file = testbed.write_hosts_file(
        tmp_path / "hosts.toml", testbed.hosts[1:], cluster={"master_port": 29500}
    )
    capsys.readouterr()
    exit_code = main(["check", str(hosts_file), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert exit_code == 0, report["findings"]
    assert [host["reach"] for host in report["hosts"]] == ["ok"] * 3
    assert report["master_port_test"]["ran"] is True
    # Node 0 of this cluster is node1: every worker reached its master port.
    assert [host["master_port_reachable"] for host in report["hosts"]] == [None, True, True]


def test_trust_offers_the_jump_host_s_key_first_then_the_hosts_behind_it(
    testbed: TestBed, client_home: Path, tmp_path: Path
) -> None:
    jump_known_hosts = tmp_path / "jump_known_hosts"
    hosts = behind_jumpbox(testbed, client_home, jump_known_hosts)

    scans = asyncio.run(scan_host_keys(hosts, timeout=5))
    jump, *behind = scans
    assert jump.host.name == JUMP and jump.check is not None
    assert jump.check.state is KeyState.UNKNOWN
    for scan in behind:
        assert scan.failure is not None and scan.failure.reach is Reach.HOSTKEY_UNKNOWN
        assert scan.failure.detail.startswith(f"through jump host {JUMP}: the host key of")
    assert list(lines_to_add(scans)) == [jump_known_hosts]
    jump_known_hosts.write_text(
        "".join(f"{line}\n" for line in lines_to_add(scans)[jump_known_hosts])
    )

    scans = asyncio.run(scan_host_keys(hosts, timeout=5))
    assert [(scan.check and scan.check.state, scan.failure) for scan in scans] == [
        (KeyState.TRUSTED, None)
    ] * 4
