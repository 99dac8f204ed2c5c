"""The connection pool against the test bed: OpenSSH sshd on separate hosts, real faults."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ddptui.config.model import HostConfig
from ddptui.remote.commands import classify_python_failure, python_argv
from ddptui.remote.connection import RemoteCluster
from ddptui.remote.status import Reach, Reachability
from tests.remote.hosts import bed_host
from tests.testbed import TestBed, cut_link, rotate_host_key, stop_sshd

T = TypeVar("T")
TIMEOUT = 2.0
MARGIN = 2.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def all_hosts(bed: TestBed, **overrides: Any) -> list[HostConfig]:
    return [bed_host(bed, host, **overrides) for host in bed.hosts]


async def connect_all(
    hosts: list[HostConfig], timeout: float = TIMEOUT, max_parallel: int = 32
) -> tuple[dict[str, Reachability], float]:
    async with RemoteCluster(
        hosts, connect_timeout=timeout, max_parallel_connects=max_parallel
    ) as cluster:
        began = time.monotonic()
        reaches = await cluster.connect_all()
        return reaches, time.monotonic() - began


def reaches_of(reaches: dict[str, Reachability]) -> dict[str, Reach]:
    return {name: reach.reach for name, reach in reaches.items()}


def test_a_healthy_cluster_connects(testbed: TestBed) -> None:
    reaches, _ = run(connect_all(all_hosts(testbed)))
    assert reaches_of(reaches) == {host.name: Reach.OK for host in testbed.hosts}
    assert "OpenSSH" in reaches["node0"].detail


def test_stopped_sshd_is_refused(testbed: TestBed) -> None:
    stop_sshd(testbed.hosts[1])
    reaches, _ = run(connect_all(all_hosts(testbed)))
    assert reaches_of(reaches) == {
        "node0": Reach.OK, "node1": Reach.REFUSED, "node2": Reach.OK, "node3": Reach.OK
    }  # fmt: skip


def test_a_cut_link_times_out_within_the_connect_timeout(testbed: TestBed) -> None:
    cut_link(testbed.hosts[2])
    reaches, elapsed = run(connect_all(all_hosts(testbed)))
    assert reaches_of(reaches) == {
        "node0": Reach.OK, "node1": Reach.OK, "node2": Reach.TIMEOUT, "node3": Reach.OK
    }  # fmt: skip
    # The dead host costs the fan-out the timeout, once: the others are not queued behind it.
    assert TIMEOUT <= elapsed <= TIMEOUT + MARGIN


def test_handshakes_beyond_the_cap_wait_for_a_slot(testbed: TestBed) -> None:
    cut_link(testbed.hosts[0])
    cut_link(testbed.hosts[1])
    hosts = all_hosts(testbed)[:2]
    reaches, elapsed = run(connect_all(hosts, timeout=1.0, max_parallel=1))
    assert reaches_of(reaches) == {"node0": Reach.TIMEOUT, "node1": Reach.TIMEOUT}
    assert elapsed >= 2.0


def test_a_rotated_host_key_is_changed(testbed: TestBed) -> None:
    rotate_host_key(testbed.hosts[3])
    reaches, _ = run(connect_all(all_hosts(testbed)))
    assert reaches["node3"].reach is Reach.HOSTKEY_CHANGED
    # The test bed writes one known_hosts line per host, in host order.
    assert f"remove the old line 4 from {testbed.known_hosts}" in reaches["node3"].detail
    assert [reaches[f"node{i}"].reach for i in range(3)] == [Reach.OK] * 3


def test_a_wrong_key_is_auth_failed(testbed: TestBed, tmp_path: Path) -> None:
    wrong = tmp_path / "id_wrong"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    hosts = [bed_host(testbed, testbed.hosts[0], identity_file=wrong)]
    reaches, _ = run(connect_all(hosts))
    assert reaches["node0"].reach is Reach.AUTH_FAILED
    assert f"{wrong}: " in reaches["node0"].detail


def test_an_unknown_host_is_hostkey_unknown(testbed: TestBed, tmp_path: Path) -> None:
    reaches, _ = run(connect_all(all_hosts(testbed, known_hosts=tmp_path / "known_hosts")))
    assert reaches_of(reaches) == {host.name: Reach.HOSTKEY_UNKNOWN for host in testbed.hosts}


def test_the_connection_is_reused(testbed: TestBed) -> None:
    host = bed_host(testbed, testbed.hosts[0])

    async def scenario() -> list[str]:
        async with RemoteCluster([host], connect_timeout=TIMEOUT) as cluster:
            await cluster.connect(host)
            argv = ["sh", "-c", 'echo "$SSH_CONNECTION"']
            return [(await cluster.run(host, argv, timeout=10)).stdout for _ in range(3)]

    seen = run(scenario())
    # SSH_CONNECTION carries the client's source port: one port, one TCP connection.
    assert len(set(seen)) == 1 and seen[0].strip()


def remote_processes(bed: TestBed, pattern: str) -> str:
    # Hosts are network namespaces, not PID ones: pgrep sees every host's processes.
    return bed.run_on(bed.hosts[0], ["pgrep", "-af", pattern]).stdout.strip()


def wait_gone(bed: TestBed, pattern: str, seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while remote_processes(bed, pattern):
        assert time.monotonic() < deadline, remote_processes(bed, pattern)
        time.sleep(0.1)


def test_a_command_past_its_timeout_is_timed_out(testbed: TestBed) -> None:
    host = bed_host(testbed, testbed.hosts[0])

    async def scenario() -> None:
        async with RemoteCluster([host], connect_timeout=TIMEOUT) as cluster:
            began = time.monotonic()
            argv = ["sh", "-c", "echo up; echo warn >&2; sleep 2"]
            result = await cluster.run(host, argv, timeout=0.5)
            assert time.monotonic() - began < 0.5 + MARGIN
            assert result.timed_out and result.exit_status is None and not result.ok
            assert (result.stdout, result.stderr) == ("up\n", "warn\n")
            # The connection survives a timed-out command.
            assert (await cluster.run(host, ["true"], timeout=5)).ok

    run(scenario())


def test_a_link_cut_mid_command_is_noticed_by_keepalive(testbed: TestBed) -> None:
    host = bed_host(testbed, testbed.hosts[1])

    async def scenario() -> None:
        async with RemoteCluster(
            [host], connect_timeout=TIMEOUT, keepalive_interval=0.5, keepalive_count_max=2
        ) as cluster:
            assert (await cluster.connect(host)).ok
            command = asyncio.create_task(cluster.run(host, ["sleep", "30"], timeout=60))
            await asyncio.sleep(0.5)
            began = time.monotonic()
            await asyncio.to_thread(cut_link, testbed.hosts[1])
            result = await command
            assert time.monotonic() - began < 0.5 * 3 + MARGIN
            assert result.exit_status is None and not result.timed_out and not result.ok
            assert result.reach is not None and result.reach.reach is Reach.ERROR
            # The dead connection is dropped, not reused: the next command reconnects.
            again = await cluster.run(host, ["true"], timeout=5)
            assert again.reach is not None and again.reach.reach is Reach.TIMEOUT

    run(scenario())


def test_python_under_the_remote_home_and_a_missing_one(testbed: TestBed) -> None:
    bed_node = testbed.hosts[0]
    (bed_node.home / "py" / "bin").mkdir(parents=True, exist_ok=True)
    link = bed_node.home / "py" / "bin" / "python"
    link.unlink(missing_ok=True)
    link.symlink_to(sys.executable)
    good = bed_host(testbed, bed_node, python="~/py/bin/python")
    missing = bed_host(testbed, bed_node, python="~/nope/bin/python")

    async def scenario() -> None:
        async with RemoteCluster([good], connect_timeout=TIMEOUT) as cluster:
            code = "import os, sys; print(sys.argv[1], os.environ['HOME'])"
            ok = await cluster.run(good, python_argv(good, "-c", code, "a b"), timeout=10)
            assert ok.stdout == f"a b {bed_node.home}\n", ok.stderr
            assert classify_python_failure(good, ok) is None
            gone = await cluster.run(missing, python_argv(missing, "-V"), timeout=10)
            reach = classify_python_failure(missing, gone)
            assert reach is not None and reach.reach is Reach.PYTHON_MISSING, gone

    run(scenario())
    link.unlink()


def test_closing_a_started_process_hangs_it_up(testbed: TestBed) -> None:
    host = bed_host(testbed, testbed.hosts[2])

    async def scenario() -> None:
        async with RemoteCluster([host], connect_timeout=TIMEOUT) as cluster:
            process = await cluster.start_process(
                host, ["sh", "-c", 'echo "$A"; echo err >&2; exec sleep 301.5'], env={"A": "a b"}
            )
            lines = process.lines()
            assert [await anext(lines), await anext(lines)] == ["a b\n", "err\n"]
            await process.close()

    run(scenario())
    wait_gone(testbed, "sleep 301.5")


@pytest.fixture(autouse=True)
def _no_leftover_uploads(testbed: TestBed) -> None:
    # Uploads land in the hosts' homes, which the test bed's restore does not empty.
    for bed_node in testbed.hosts:
        for child in ("runs", "py"):
            subprocess.run(["rm", "-rf", str(bed_node.home / child)], check=True)
