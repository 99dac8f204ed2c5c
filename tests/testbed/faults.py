"""Faults a real cluster has, made on demand on one test-bed host, and undone.

Each fault has an explicit undo; :func:`restore` undoes them all (the fixtures call it
around every test), so a fault never leaks into the next test.
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ddptui.onhost.probe_torch_cache import TORCH_CACHE_DIR
from tests.testbed import keys, network, sshd
from tests.testbed.host import NameResolution, PortHolder, TestHost, run_on


def cut_link(host: TestHost) -> None:
    """Unplug the host: packets to and from it vanish, so connects time out (not refused)."""
    network.run(["ip", "link", "set", host.veth, "down"])


def restore_link(host: TestHost) -> None:
    network.run(["ip", "link", "set", host.veth, "up"])


@contextmanager
def link_cut(host: TestHost) -> Iterator[None]:
    cut_link(host)
    try:
        yield
    finally:
        restore_link(host)


def stop_sshd(host: TestHost) -> None:
    """Stop the host's sshd: connects to port 22 are refused; open sessions live on."""
    sshd.stop(host)


def start_sshd(host: TestHost) -> None:
    """Start the host's sshd and wait until it answers."""
    sshd.start(host)


@contextmanager
def sshd_stopped(host: TestHost) -> Iterator[None]:
    stop_sshd(host)
    try:
        yield
    finally:
        start_sshd(host)


def kill_whole(host: TestHost) -> None:
    """Kill every process of the host, its sshd listener too: a host that died (a kernel
    panic, its power pulled) while its address stays up, so connects are refused.
    :func:`restore` starts its sshd again."""
    network.kill_and_wait(network.namespace_inodes(host.namespace_files()))


def freeze(host: TestHost) -> None:
    """SIGSTOP every process of the host: it keeps its link but answers nothing (a hung node).

    The kernel still completes TCP handshakes into listen backlogs, so SSH connects succeed
    at the TCP level and then hang waiting for the banner.
    """
    inodes = network.namespace_inodes(host.namespace_files())
    stopped: set[int] = set()
    # A process may fork while we stop its siblings; repeat until no new pid shows up.
    while pids := set(network.pids_in(inodes)) - stopped:
        network.signal_all(pids, signal.SIGSTOP)
        stopped |= pids
    # A signal is delivered when its process next enters the kernel: one running on the other
    # core shows R for a moment after the kill.
    deadline = time.monotonic() + STOP_SETTLE_S
    while any(network.process_state(pid) not in STOPPED_OR_GONE for pid in stopped):
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)


STOP_SETTLE_S = 2.0
STOPPED_OR_GONE = {"T", "t", "Z", "X", None}


def thaw(host: TestHost) -> None:
    inodes = network.namespace_inodes(host.namespace_files())
    network.signal_all(network.pids_in(inodes), signal.SIGCONT)


@contextmanager
def frozen(host: TestHost) -> Iterator[None]:
    freeze(host)
    try:
        yield
    finally:
        thaw(host)


def rotate_host_key(host: TestHost) -> str:
    """Give the host a new host key (known_hosts keeps the old one); return the new public key.

    sshd is restarted if it was running, since it loads host keys only at start.
    """
    public = keys.write_key_pair(host.host_key, host.hostname)
    host.state.key_rotated = True
    _restart_if_running(host)
    return public


def restore_host_key(host: TestHost) -> None:
    """Put back the key known_hosts lists."""
    keys.write_private(host.host_key, host.state.original_host_key)
    host.state.key_rotated = False
    _restart_if_running(host)


def _restart_if_running(host: TestHost) -> None:
    if sshd.running(host):
        sshd.stop(host)
        sshd.start(host)


def occupy_port(host: TestHost, port: int) -> PortHolder:
    """Listen on ``port`` (all addresses) inside the host until the handle is released."""
    return PortHolder(host, port)


def firewall_port(host: TestHost, port: int) -> None:
    """Silently drop TCP packets arriving for ``port`` on the host, as a site firewall does.

    Connections to it then time out; SSH and every other port still work.
    """
    rule = ["INPUT", "-p", "tcp", "--dport", str(port), "-j", "DROP"]
    run_on(host, ["iptables", "-A", *rule], check=True)
    host.state.firewalled = True


def cut_head_link(host: TestHost, head_address: str) -> None:
    """Drop every packet between the host and the head node (``TestBed.gateway``), while the
    hosts still reach each other: a head node's link blip, a VPN or login-node network down.

    Open connections to the head time out; training traffic between the hosts flows on.
    """
    run_on(host, ["iptables", "-A", "INPUT", "-s", head_address, "-j", "DROP"], check=True)
    run_on(host, ["iptables", "-A", "OUTPUT", "-d", head_address, "-j", "DROP"], check=True)
    host.state.firewalled = True


def open_firewall(host: TestHost) -> None:
    """Remove every rule :func:`firewall_port` and :func:`cut_head_link` added."""
    for chain in ("INPUT", "OUTPUT"):
        run_on(host, ["iptables", "-F", chain], check=True)
    host.state.firewalled = False


def set_name_resolution(host: TestHost, mode: NameResolution, name: str | None = None) -> None:
    """Make the host resolve ``name`` (default: its own hostname; or another host's) to the
    right address, to 127.0.1.1, or not at all.

    Applies to processes started afterwards, including new SSH sessions. One name at a time:
    it replaces the host's previous change.
    """
    # Every process of the host sees this file through a bind mount made when it entered the
    # namespace; replacing the file (a new inode) would leave them on the old one, so it is
    # truncated and rewritten in place.
    with host.etc_hosts.open("w") as out:
        out.write(host.etc_hosts_text(mode, name))


def install_double(host: TestHost, name: str, script_text: str) -> Path:
    """Put an executable ``name`` first on this host's PATH (e.g. a recorded nvidia-smi)."""
    path = host.bin_dir / name
    path.write_text(script_text)
    path.chmod(0o755)
    return path


def install_module(host: TestHost, files: dict[str, str]) -> None:
    """Put Python modules (and what they read beside them) first on this host's PYTHONPATH:
    ``{"pynvml.py": …}``, a recorded NVML in place of the GPU driver's."""
    for name, text in files.items():
        (host.python_dir / name).write_text(text)


def log_kernel(host: TestHost, message: str) -> None:
    """The host's kernel logs ``message``, as ``/dev/kmsg`` gives a record to its readers."""
    with host.kernel_log.open("a") as log:
        log.write(f"4,{time.monotonic_ns()},{time.monotonic_ns() // 1000},-;{message}\n")


def remove_double(host: TestHost, name: str) -> None:
    (host.bin_dir / name).unlink(missing_ok=True)


def limit_link(host: TestHost, rate: str) -> None:
    """The host's link at ``rate`` (``tc`` rate, ``50mbit``) for what it sends: a slow NIC, a
    bad cable, a congested switch port."""
    argv = ["tc", "qdisc", "replace", "dev", host.ifname, "root", "tbf", "rate", rate]
    network.run([*host.exec_prefix(), *argv, "burst", "64kb", "latency", "100ms"])
    host.state.limited = True


def unlimit_link(host: TestHost) -> None:
    network.run([*host.exec_prefix(), "tc", "qdisc", "del", "dev", host.ifname, "root"])
    host.state.limited = False


def restore(hosts: Sequence[TestHost]) -> None:
    """Undo every fault and clear per-test state: the hosts as they were after bring-up.

    Links up at full speed, nothing frozen, no held ports, original host keys, sshd running,
    normal name resolution, no processes but sshd's listener, empty ``bin_dir``,
    ``python_dir``, ``kernel_log``, ``workdir`` (but for the probe's kept torch facts, as a
    real host keeps them) and ``home``.
    """
    for host in hosts:
        thaw(host)
        if host.state.limited:
            unlimit_link(host)
        for holder in list(host.state.held_ports):
            holder.release()
        if host.state.firewalled:
            open_firewall(host)
    network.ip_batch(f"link set {host.veth} up" for host in hosts)
    for host in hosts:
        if host.state.key_rotated:
            keys.write_private(host.host_key, host.state.original_host_key)
            host.state.key_rotated = False
            sshd.stop(host)
        listener = sshd.listener_pid(host)
        network.kill_and_wait(
            network.namespace_inodes(host.namespace_files()),
            keep=() if listener is None else (listener,),
        )
        if listener is None:
            sshd.stop(host)  # reaps a listener that a test killed by itself
            sshd.spawn(host)
        if host.etc_hosts.read_text() != host.etc_hosts_text("normal"):
            set_name_resolution(host, "normal")
        for directory in (host.bin_dir, host.python_dir, host.home):
            _empty(directory)
        host.kernel_log.write_text("")
        _empty(host.workdir, keep=TORCH_CACHE_DIR)
    sshd.wait_ready(hosts)


def _empty(directory: Path, keep: str | None = None) -> None:
    for child in directory.iterdir():
        if child.name == keep:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")
CPU_PERIOD_US = 100_000


@contextmanager
def cpu_throttled(pids: Sequence[int], cores: float, name: str) -> Iterator[None]:
    """``pids`` (with all their threads) held to ``cores`` of CPU time for the block, as a
    throttled host or a container's limit holds them: a cgroup of their own with the CFS quota
    (``cpu.max`` on cgroup v2, ``cpu.cfs_quota_us`` on v1), undone after (the processes back
    where the bed started them, the cgroup removed)."""
    v2 = (CGROUP_V2 / "cgroup.controllers").is_file()
    root = CGROUP_V2 if v2 else CGROUP_V1_CPU
    group = root / name
    group.mkdir()
    quota = int(cores * CPU_PERIOD_US)
    try:
        if v2:
            (group / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
        for pid in pids:
            (group / "cgroup.procs").write_text(str(pid))
        yield
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            try:
                (root / "cgroup.procs").write_text(pid)
            except OSError:
                continue  # gone meanwhile
        group.rmdir()
