"""Each fault helper makes a fault a client can observe, and its undo really undoes it."""

from __future__ import annotations

import subprocess

import pytest

from ddptui.onhost.probe_torch_cache import TORCH_CACHE_DIR
from tests.testbed import (
    TestBed,
    TestHost,
    cut_link,
    firewall_port,
    freeze,
    install_double,
    install_module,
    log_kernel,
    network,
    occupy_port,
    restore_host_key,
    restore_link,
    rotate_host_key,
    set_name_resolution,
    start_sshd,
    stop_sshd,
    tcp,
    thaw,
)
from tests.testbed.faults import limit_link
from tests.testbed.host import run_on

pytestmark = pytest.mark.cluster


def _ssh_ok(bed: TestBed, host: TestHost) -> bool:
    return bed.ssh(host, ["true"], timeout=15).returncode == 0


def _tcp_from(bed: TestBed, source: TestHost, target: TestHost, timeout: float) -> str:
    probe = [bed.python, tcp.__file__, target.address, "22", str(timeout)]
    return bed.run_on(source, probe, check=True).stdout.strip()


def test_cut_link_makes_connects_time_out_from_head_and_peers(testbed: TestBed) -> None:
    node0, node1, node2 = testbed.hosts[:3]
    cut_link(node1)
    # Longer than ARP's ~3 s give-up: a cut must look like a dead machine (silence),
    # never like "No route to host".
    assert tcp.outcome(node1.address, 22, 3.5) == "timeout"
    assert _tcp_from(testbed, node0, node1, 1.0) == "timeout"
    assert _tcp_from(testbed, node1, node2, 1.0) == "timeout"
    assert tcp.outcome(node2.address, 22, 2) == "open"
    restore_link(node1)
    assert tcp.outcome(node1.address, 22, 2) == "open"
    assert _ssh_ok(testbed, node1)


def test_stop_sshd_refuses_connects_and_start_brings_it_back(testbed: TestBed) -> None:
    host = testbed.hosts[2]
    stop_sshd(host)
    assert tcp.outcome(host.address, 22, 2) == "refused"
    failed = testbed.ssh(host, ["true"])
    assert failed.returncode == 255
    assert "Connection refused" in failed.stderr
    start_sshd(host)
    assert _ssh_ok(testbed, host)


def _states(host: TestHost) -> set[str]:
    pids = subprocess.run(
        ["ip", "netns", "pids", host.netns], capture_output=True, text=True, check=True
    ).stdout.split()
    # A process gone since listed (a session ending as the host thaws) has no state.
    return {state for pid in pids if (state := network.process_state(int(pid))) is not None}


def test_freeze_stops_every_process_and_thaw_resumes_them(testbed: TestBed) -> None:
    host = testbed.hosts[3]
    testbed.ssh(host, ["sh", "-c", "nohup sleep 300 >/dev/null 2>&1 &"])
    freeze(host)
    assert _states(host) == {"T"}
    # The kernel still accepts the TCP connection; sshd never sends its banner.
    assert tcp.outcome(host.address, 22, 2) == "open"
    assert tcp.banner(host.address, timeout=1.0) == b""
    hung = subprocess.run(
        [*testbed.ssh_argv(host, ["true"], connect_timeout=2)],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert hung.returncode == 255
    assert "timed out" in hung.stderr
    thaw(host)
    assert "T" not in _states(host)
    assert _ssh_ok(testbed, host)


def test_rotated_host_key_is_refused_by_strict_openssh(testbed: TestBed) -> None:
    host = testbed.hosts[0]
    new_key = rotate_host_key(host)
    assert new_key.split()[1] not in testbed.known_hosts.read_text()
    refused = testbed.ssh(host, ["true"])
    assert refused.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in refused.stderr
    assert _ssh_ok(testbed, testbed.hosts[1])
    restore_host_key(host)
    assert _ssh_ok(testbed, host)


_BIND = """
import socket, sys
s = socket.socket()
# As a rendezvous store binds: a connection the check made and closed may still be in TIME_WAIT
# on the port, which only a listener holding it makes it busy for.
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("0.0.0.0", int(sys.argv[1])))
    print("bound")
except OSError as exc:
    print(exc.errno)
"""


def test_occupy_port_holds_it_on_that_host_only(testbed: TestBed) -> None:
    node0, node1 = testbed.hosts[:2]
    holder = occupy_port(node0, 29500)
    assert tcp.outcome(node0.address, 29500, 2) == "open"
    in_use = testbed.run_on(node0, [testbed.python, "-c", _BIND, "29500"], check=True)
    assert in_use.stdout.strip() == "98"  # EADDRINUSE
    elsewhere = testbed.run_on(node1, [testbed.python, "-c", _BIND, "29500"], check=True)
    assert elsewhere.stdout.strip() == "bound"
    holder.release()
    assert tcp.outcome(node0.address, 29500, 2) == "refused"
    freed = testbed.run_on(node0, [testbed.python, "-c", _BIND, "29500"], check=True)
    assert freed.stdout.strip() == "bound"


def test_firewall_drops_one_port_and_restore_opens_it(testbed: TestBed) -> None:
    node0 = testbed.hosts[0]
    holder = occupy_port(node0, 29500)
    firewall_port(node0, 29500)
    assert tcp.outcome(node0.address, 29500, 2) == "timeout"
    assert tcp.outcome(node0.address, 22, 2) == "open"
    testbed.restore()
    assert holder not in node0.state.held_ports
    holder = occupy_port(node0, 29500)
    assert tcp.outcome(node0.address, 29500, 2) == "open"
    holder.release()


def _resolve_self(bed: TestBed, host: TestHost) -> subprocess.CompletedProcess[str]:
    # A fresh SSH session each time: what a probe over SSH would see.
    return bed.ssh(host, ["sh", "-c", 'getent hosts "$(hostname)"'])


def test_name_resolution_modes_apply_to_new_ssh_sessions(testbed: TestBed) -> None:
    host = testbed.hosts[1]
    assert _resolve_self(testbed, host).stdout.split() == [host.address, host.hostname]
    inode = host.etc_hosts.stat().st_ino
    set_name_resolution(host, "loopback")
    assert _resolve_self(testbed, host).stdout.split() == ["127.0.1.1", host.hostname]
    set_name_resolution(host, "missing")
    missing = _resolve_self(testbed, host)
    assert (missing.returncode, missing.stdout) == (2, "")
    assert _resolve_self(testbed, testbed.hosts[2]).returncode == 0
    set_name_resolution(host, "normal")
    assert _resolve_self(testbed, host).stdout.split() == [host.address, host.hostname]
    assert host.etc_hosts.stat().st_ino == inode


def test_name_resolution_of_a_peer(testbed: TestBed) -> None:
    node0, node1 = testbed.hosts[:2]

    def resolve_node0() -> list[str]:
        return testbed.ssh(node1, ["getent", "hosts", node0.hostname]).stdout.split()

    assert resolve_node0() == [node0.address, node0.hostname]
    set_name_resolution(node1, "missing", name=node0.hostname)
    assert resolve_node0() == []
    assert _resolve_self(testbed, node1).stdout.split() == [node1.address, node1.hostname]
    set_name_resolution(node1, "loopback", name=node0.hostname)
    assert resolve_node0() == ["127.0.1.1", node0.hostname]
    testbed.restore()
    assert resolve_node0() == [node0.address, node0.hostname]


def test_double_is_first_on_path_of_its_host_only(testbed: TestBed) -> None:
    node0, node1 = testbed.hosts[:2]
    path = install_double(node0, "nvidia-smi", '#!/bin/sh\necho "double $*"\n')
    ran = testbed.ssh(node0, ["nvidia-smi", "--query-gpu=name"])
    assert ran.stdout == "double --query-gpu=name\n"
    assert testbed.ssh(node0, ["sh", "-c", "command -v nvidia-smi"]).stdout.strip() == str(path)
    other = testbed.ssh(node1, ["sh", "-c", "command -v nvidia-smi"]).stdout.strip()
    assert other != str(path)


def test_restore_undoes_every_fault_at_once(testbed: TestBed) -> None:
    node0, node1, node2, node3 = testbed.hosts
    cut_link(node0)
    stop_sshd(node1)
    freeze(node2)
    rotate_host_key(node3)
    occupy_port(node3, 29500)
    set_name_resolution(node3, "missing")
    install_double(node3, "nvidia-smi", "#!/bin/sh\nexit 9\n")
    install_module(node3, {"pynvml.py": "raise ImportError\n"})
    log_kernel(node3, "NVRM: Xid (PCI:0000:00:06): 79, GPU has fallen off the bus.")
    limit_link(node3, "50mbit")
    (node3.workdir / "run-state").write_text("old")
    testbed.restore()
    for host in testbed.hosts:
        assert _ssh_ok(testbed, host), host.name
        assert _resolve_self(testbed, host).returncode == 0
    assert tcp.outcome(node3.address, 29500, 2) == "refused"
    assert list(node3.bin_dir.iterdir()) == list(node3.python_dir.iterdir()) == []
    assert node3.kernel_log.read_text() == ""
    # The probe's torch facts stay, as on a real host; nothing else does.
    assert {path.name for path in node3.workdir.iterdir()} <= {TORCH_CACHE_DIR}
    qdisc = run_on(node3, ["tc", "qdisc", "show", "dev", node3.ifname]).stdout
    assert "tbf" not in qdisc, qdisc
    assert "T" not in _states(node2)
