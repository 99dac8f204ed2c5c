"""The demo's hosts: real SSH servers on 127.0.0.1 in this process, private to the demo."""

from __future__ import annotations

import asyncio
import socket
import stat
import time
from pathlib import Path

import asyncssh
import pytest

from ddptui.check.run import check_cluster
from ddptui.config import load_config
from ddptui.demo.cluster import DemoCluster, demo_cluster
from ddptui.health import Severity


def _connect(
    cluster: DemoCluster, index: int, key: Path | None = None
) -> asyncssh.SSHClientConnection:
    config = load_config(cluster.hosts_file)
    host = config.hosts[index]
    assert host.identity_file is not None and host.known_hosts is not None
    return asyncssh.connect(
        host.address,
        host.port,
        username=host.user,
        client_keys=[str(key or host.identity_file)],
        known_hosts=str(host.known_hosts),
        agent_path=None,
        config=None,
    )


def _refused(address: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(5)
        return probe.connect_ex((address, port)) != 0


def test_two_demos_side_by_side_have_their_own_ports_keys_and_homes() -> None:
    with demo_cluster(2, 1) as first, demo_cluster(2, 1) as second:
        ports = [host.port for cluster in (first, second) for host in cluster.hosts]
        assert len(set(ports)) == 4
        assert first.root != second.root
        for cluster in (first, second):
            assert stat.S_IMODE(cluster.root.stat().st_mode) == 0o700
            config = load_config(cluster.hosts_file)
            assert {host.address for host in config.hosts} == {"127.0.0.1"}
            assert config.hosts[0].identity_file is not None
            assert stat.S_IMODE(config.hosts[0].identity_file.stat().st_mode) == 0o600

        async def homes() -> list[str]:
            found = []
            for cluster in (first, second):
                for index in range(2):
                    async with _connect(cluster, index) as conn:
                        result = await conn.run('echo "$HOME $(pwd)"', check=True)
                        found.append(str(result.stdout).strip())
            return found

        seen = asyncio.run(homes())
        expected = [f"{host.home} {host.home}" for c in (first, second) for host in c.hosts]
        assert seen == expected
        # Each demo's client key opens only its own hosts.
        foreign = load_config(second.hosts_file).hosts[0].identity_file

        async def cross() -> None:
            async with _connect(first, 0, key=foreign):
                pass

        with pytest.raises(asyncssh.PermissionDenied):
            asyncio.run(cross())


def test_hosts_listen_on_127_0_0_1_only_and_leave_nothing_when_closed() -> None:
    with demo_cluster(1, 1) as cluster:
        port = cluster.hosts[0].port
        assert not _refused("127.0.0.1", port)
        assert _refused("127.0.0.2", port)

        async def start_sleeper() -> int:
            conn = await _connect(cluster, 0)
            process = await conn.create_process("echo $$; exec sleep 600")
            pid = int(await process.stdout.readline())
            conn.abort()
            return pid

        sleeper = asyncio.run(start_sleeper())
        assert Path(f"/proc/{sleeper}").exists()
        root = cluster.root
    assert not root.exists()
    assert _refused("127.0.0.1", port)
    # A session's command still running when the demo ends is ended with it.
    deadline = time.monotonic() + 10
    while Path(f"/proc/{sleeper}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{sleeper}").exists()


def test_the_health_check_finds_a_demo_cluster_healthy() -> None:
    """Every host at 127.0.0.1: loopback is what its ranks should meet on, not the trap."""
    with demo_cluster(2, 2) as cluster:
        config = load_config(cluster.hosts_file)
        report = asyncio.run(check_cluster(config))
    assert report.healthy, report.findings
    assert [f for f in report.findings if f.severity is not Severity.INFO] == []
    assert report.master_port_test.ran
    assert all(check.master_port_reachable for check in report.checks[1:])
