"""The test bed gives real, separate hosts, and leaves nothing behind."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ddptui.config.model import ClusterConfig, HostConfig, JobConfig
from tests.testbed import TestBed, TestBedBusy, tcp

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]


def test_each_host_has_its_own_hostname_address_and_home_over_strict_ssh(testbed: TestBed) -> None:
    seen = set()
    for host in testbed.hosts:
        result = testbed.ssh(host, ["sh", "-c", 'hostname; ip -4 -o addr show eth0; echo "$HOME"'])
        assert result.returncode == 0, result.stderr
        hostname, addr_line, home = result.stdout.splitlines()
        assert hostname == host.hostname
        assert f"inet {host.address}/24" in addr_line
        assert home == str(host.home)
        seen.add((hostname, host.address, home, host.workdir))
    assert len(seen) == len(testbed.hosts) == 4
    assert len({h.workdir for h in testbed.hosts}) == 4


def test_hosts_reach_each_other_across_namespaces(testbed: TestBed) -> None:
    node0, node1 = testbed.hosts[:2]
    probe = [testbed.python, tcp.__file__, node0.address, "22", "2"]
    assert testbed.run_on(node1, probe, check=True).stdout.strip() == "open"
    # node0's sshd listens on its own address only, so node1's loopback has nothing on 22:
    # the connect above really left node1's network stack.
    local = [testbed.python, tcp.__file__, "127.0.0.1", "22", "2"]
    assert testbed.run_on(node1, local, check=True).stdout.strip() == "refused"


def test_cluster_hostnames_resolve_on_every_host(testbed: TestBed) -> None:
    node0, node3 = testbed.hosts[0], testbed.hosts[3]
    result = testbed.run_on(node3, ["getent", "hosts", node0.hostname], check=True)
    assert result.stdout.split() == [node0.address, node0.hostname]


def test_run_on_runs_inside_the_host(testbed: TestBed) -> None:
    host = testbed.hosts[2]
    result = testbed.run_on(host, ["sh", "-c", "hostname; cat"], input="piped\n", check=True)
    assert result.stdout.splitlines() == [host.hostname, "piped"]
    assert testbed.run_on(host, ["false"]).returncode == 1
    with pytest.raises(subprocess.CalledProcessError):
        testbed.run_on(host, ["false"], check=True)


def test_hosts_file_follows_the_schema(testbed: TestBed, tmp_path: Path) -> None:
    path = testbed.write_hosts_file(
        tmp_path / "hosts.toml",
        testbed.hosts[:2],
        cluster={"connect_timeout": 1, "env": {"OMP_NUM_THREADS": "1"}},
        host_overrides={"node1": {"rank0": True}},
        job={"args": ["--epochs", "1"]},
    )
    doc = tomllib.loads(path.read_text())
    cluster, hosts, job = doc.pop("cluster"), doc.pop("hosts"), doc.pop("job")
    assert doc == {}
    machine_keys = {f.name for f in dataclasses.fields(HostConfig)} - {"name", "address", "rank0"}
    assert set(cluster) <= machine_keys | {f.name for f in dataclasses.fields(ClusterConfig)}
    assert cluster["user"] == "root"
    assert cluster["identity_file"] == str(testbed.identity_file)
    assert cluster["known_hosts"] == str(testbed.known_hosts)
    assert cluster["python"] == testbed.python
    assert cluster["backend"] == "gloo"
    assert cluster["connect_timeout"] == 1
    assert cluster["env"] == {"OMP_NUM_THREADS": "1"}
    assert [h["name"] for h in hosts] == ["node0", "node1"]
    assert all(set(h) <= {f.name for f in dataclasses.fields(HostConfig)} for h in hosts)
    assert hosts[0] == {
        "name": "node0",
        "address": testbed.hosts[0].address,
        "workdir": str(testbed.hosts[0].workdir),
    }
    assert hosts[1]["rank0"] is True
    assert set(job) <= {f.name for f in dataclasses.fields(JobConfig)}
    assert job == {"nproc_per_node": 2, "args": ["--epochs", "1"]}


def test_a_second_bed_with_a_live_prefix_is_refused_and_harms_nothing(
    testbed: TestBed, tmp_path: Path
) -> None:
    with pytest.raises(TestBedBusy):
        TestBed.start(1, tmp_path / "other", prefix=testbed.prefix)
    assert tcp.banner(testbed.hosts[0].address).startswith(b"SSH-2.0-")


def _machine_state(prefix: str) -> str:
    """Namespaces and links `ip` sees with the prefix (not the test bed's own bookkeeping)."""
    listings = [
        subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        for argv in (["ip", "netns", "list"], ["ip", "-o", "link"])
    ]
    return "\n".join(
        line for text in listings for line in text.splitlines() if f"{prefix}-" in line
    )


def _netns_pids(netns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def _alive(pid: int) -> bool:
    # A killed process whose parent has not reaped it yet is a zombie: dead, though listed.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_stop_leaves_no_namespace_link_or_process(testbed_capable: None, tmp_path: Path) -> None:
    bed = TestBed.start(2, tmp_path / "bed", prefix="ddptstop")
    # A process started on a host must go too, not only sshd.
    started = bed.ssh(bed.hosts[1], ["sh", "-c", "nohup sleep 300 >/dev/null 2>&1 & echo $!"])
    sleeper = int(started.stdout)
    pids = [pid for host in bed.hosts for pid in _netns_pids(host.netns)]
    assert sleeper in pids
    assert len(pids) >= 3
    assert "ddptstop-node1" in _machine_state("ddptstop")
    bed.stop()
    assert bed.residue() == []
    assert _machine_state("ddptstop") == ""
    assert not any(_alive(pid) for pid in pids)


_CRASHING_RUN = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from tests.testbed import TestBed
    bed = TestBed.start(2, Path(sys.argv[1]), prefix="ddptkill")
    print(" ".join(str(h.state.sshd.pid) for h in bed.hosts), flush=True)
    time.sleep(300)
    """
)


def test_start_removes_what_a_killed_run_left(testbed_capable: None, tmp_path: Path) -> None:
    crashed = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_RUN, str(tmp_path / "crashed"), str(REPO)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert crashed.stdout is not None
    old_sshd = [int(pid) for pid in crashed.stdout.readline().split()]
    assert len(old_sshd) == 2
    os.kill(crashed.pid, signal.SIGKILL)
    crashed.wait()
    assert "ddptkill-node1" in _machine_state("ddptkill")
    assert all(_alive(pid) for pid in old_sshd)

    bed = TestBed.start(1, tmp_path / "fresh", prefix="ddptkill")
    try:
        assert [h.netns for h in bed.hosts] == ["ddptkill-node0"]
        assert "ddptkill-node1" not in _machine_state("ddptkill")
        assert not any(_alive(pid) for pid in old_sshd)
        assert bed.ssh(bed.hosts[0], ["true"]).returncode == 0
    finally:
        bed.stop()
    assert _machine_state("ddptkill") == ""
