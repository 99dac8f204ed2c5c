"""Network namespaces, a bridge and veth pairs: the wiring of the test bed.

Everything created here is named after a prefix (``PREFIX-br``, ``PREFIX-v0``, netns
``PREFIX-node0``), so a crashed run's leftovers can be found by name and removed.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

RUNTIME_DIR = Path("/run/ddptui-testbed")
"""Per-prefix locks and persistent UTS namespaces; fixed, so leftovers are found after a crash."""
NETNS_ETC = Path("/etc/netns")
NETNS_RUN = Path("/run/netns")
SUBNET_POOL = ipaddress.IPv4Network("10.213.0.0/16")
HOST_IFNAME = "eth0"
"""The name of every host's own interface, inside its namespace (like a real machine's NIC)."""

_PREFIX_RE = re.compile(r"[a-z][a-z0-9]{0,7}")


class TestBedError(RuntimeError):
    """The test bed could not be brought up, changed or torn down."""

    __test__ = False


def check_prefix(prefix: str) -> None:
    # Interface names are limited to 15 bytes ("PREFIX-v123" must fit), and a "-" inside a
    # prefix would make "ddpt-" leftovers match another prefix's objects.
    if not _PREFIX_RE.fullmatch(prefix):
        raise TestBedError(f"prefix must match {_PREFIX_RE.pattern}, got {prefix!r}")


def run(
    argv: Sequence[str],
    *,
    input: str | None = None,
    timeout: float = 30,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing text output; a failure names the command and its stderr."""
    proc = subprocess.run(
        list(argv), input=input, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise TestBedError(
            f"{shlex.join(argv)} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout}"
        )
    return proc


def ip_batch(commands: Iterable[str], netns: str | None = None) -> None:
    """Run many ``ip`` commands in one process (one fork instead of dozens)."""
    argv = ["ip", *(["-n", netns] if netns else []), "-batch", "-"]
    run(argv, input="".join(f"{line}\n" for line in commands))


@dataclass(frozen=True)
class HostLink:
    """One host's place on the bridge."""

    netns: str
    veth: str
    """The root-namespace end of the host's veth pair, enslaved to the bridge."""
    address: str
    mac: str


def host_mac(index: int) -> str:
    # Fixed MACs let every neighbour table be filled in advance (see build_network).
    return f"02:dd:00:00:{index >> 8:02x}:{index & 0xFF:02x}"


GATEWAY_MAC = "02:dd:00:00:ff:fe"


def bridge_name(prefix: str) -> str:
    return f"{prefix}-br"


def choose_subnet() -> ipaddress.IPv4Network:
    """A /24 of the pool that overlaps nothing routed or addressed on this machine."""
    used = [
        ipaddress.IPv4Network(word, strict=False)
        for cmd in (["ip", "-4", "route", "show", "table", "all"], ["ip", "-4", "-o", "addr"])
        for line in run(cmd).stdout.splitlines()
        if line.split()[:2] != ["blackhole", str(SUBNET_POOL)]
        for word in line.split()
        if re.fullmatch(r"\d+\.\d+\.\d+\.\d+(/\d+)?", word)
    ]
    for subnet in SUBNET_POOL.subnets(new_prefix=24):
        if not any(subnet.overlaps(net) for net in used):
            return subnet
    raise TestBedError(f"every /24 of {SUBNET_POOL} is already in use")


def build_network(prefix: str, subnet: ipaddress.IPv4Network, links: Sequence[HostLink]) -> None:
    """Create the bridge (with the subnet's first address) and one namespace per host.

    Every neighbour entry is permanent: nobody ever ARPs. A cut link then swallows packets
    silently, so a connect times out as it would to a dead machine, instead of failing fast
    with "No route to host" when ARP gives up.
    """
    bridge = bridge_name(prefix)
    gateway = str(subnet.network_address + 1)
    root = [f"netns add {link.netns}" for link in links]
    # Traffic to a pool address that no live test bed owns (a test that outlived its bed)
    # is dropped here rather than sent out of the default route to a stranger's network.
    # The bridge's /24 route is more specific, so a live bed is unaffected; the route stays.
    root.append(f"route replace blackhole {SUBNET_POOL}")
    root += [
        f"link add name {bridge} address {GATEWAY_MAC} type bridge",
        f"addr add {gateway}/{subnet.prefixlen} dev {bridge}",
        f"link set {bridge} up",
    ]
    for link in links:
        root += [
            f"link add {link.veth} type veth peer name {HOST_IFNAME} "
            f"address {link.mac} netns {link.netns}",
            f"link set {link.veth} master {bridge} up",
            f"neigh replace {link.address} lladdr {link.mac} dev {bridge} nud permanent",
        ]
    ip_batch(root)
    for link in links:
        inside = [
            "link set lo up",
            f"addr add {link.address}/{subnet.prefixlen} dev {HOST_IFNAME}",
            f"link set {HOST_IFNAME} up",
            f"neigh replace {gateway} lladdr {GATEWAY_MAC} dev {HOST_IFNAME} nud permanent",
        ]
        inside += [
            f"neigh replace {peer.address} lladdr {peer.mac} dev {HOST_IFNAME} nud permanent"
            for peer in links
            if peer is not link
        ]
        ip_batch(inside, netns=link.netns)


def namespace_inodes(paths: Iterable[Path]) -> set[int]:
    """Inodes of bound namespace files (``/run/netns/X``, a UTS file), for finding members."""
    inodes = set()
    for path in paths:
        try:
            inodes.add(path.stat().st_ino)
        except FileNotFoundError:
            continue
    return inodes


def pids_in(inodes: set[int]) -> list[int]:
    """Live processes whose network or UTS namespace is one of ``inodes``."""
    if not inodes:
        return []
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if _is_zombie(proc):
                continue
            if any((proc / "ns" / kind).stat().st_ino in inodes for kind in ("net", "uts")):
                pids.append(int(proc.name))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return pids


def _is_zombie(proc: Path) -> bool:
    # A zombie has no namespaces left to leave; it only waits for its parent to reap it.
    return process_state(int(proc.name)) == "Z"


def process_state(pid: int) -> str | None:
    """``pid``'s state letter (``ps``'s STAT: R, S, T, Z…), or None once it has gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2]


def signal_all(pids: Iterable[int], signum: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            continue


def kill_and_wait(inodes: set[int], keep: Iterable[int] = (), timeout: float = 5.0) -> None:
    """SIGKILL every process in these namespaces (except ``keep``) until none is left."""
    spared = set(keep)
    deadline = time.monotonic() + timeout
    while pids := [pid for pid in pids_in(inodes) if pid not in spared]:
        if time.monotonic() > deadline:
            raise TestBedError(f"processes {pids} survived SIGKILL for {timeout} s")
        signal_all(pids, signal.SIGKILL)
        time.sleep(0.01)


def _names(prefix: str, listing: Iterable[str]) -> list[str]:
    return sorted(name for name in listing if name.startswith(f"{prefix}-"))


def netns_names(prefix: str) -> list[str]:
    return _names(prefix, _listdir(NETNS_RUN))


def link_names(prefix: str) -> list[str]:
    return _names(prefix, (p.name for p in Path("/sys/class/net").iterdir()))


def etc_dirs(prefix: str) -> list[Path]:
    return [NETNS_ETC / name for name in _names(prefix, _listdir(NETNS_ETC))]


def uts_mounts(prefix: str) -> list[Path]:
    runtime = RUNTIME_DIR / prefix
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = Path(line.split()[4])
        if mount_point.parent == runtime:
            mounts.append(mount_point)
    return mounts


def _listdir(path: Path) -> list[str]:
    return [p.name for p in path.iterdir()] if path.is_dir() else []


def leftovers(prefix: str) -> list[str]:
    """Everything on this machine that carries the prefix, one description each."""
    namespaces = netns_names(prefix)
    mounts = uts_mounts(prefix)
    found = [f"netns {name}" for name in namespaces]
    found += [f"link {name}" for name in link_names(prefix)]
    found += [f"mount {path}" for path in mounts]
    found += [f"dir {path}" for path in etc_dirs(prefix)]
    inodes = namespace_inodes([NETNS_RUN / name for name in namespaces] + mounts)
    found += [f"process {pid} ({_comm(pid)})" for pid in pids_in(inodes)]
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except FileNotFoundError:
        return "exited"


def remove(prefix: str, extra_inodes: Iterable[int] = ()) -> None:
    """Remove every object carrying the prefix: processes first, then namespaces and links.

    ``extra_inodes`` names namespaces already unbound (a half-finished teardown) whose
    processes must still go.
    """
    namespaces = netns_names(prefix)
    mounts = uts_mounts(prefix)
    inodes = namespace_inodes([NETNS_RUN / name for name in namespaces] + mounts)
    kill_and_wait(inodes | set(extra_inodes))
    # Deleting a bridge-side veth deletes its peer at once; namespaces are destroyed
    # asynchronously after "netns del", so links go first to leave nothing to race with.
    links = link_names(prefix)
    if links:
        ip_batch(f"link del {name}" for name in links)
    if namespaces:
        ip_batch(f"netns del {name}" for name in namespaces)
    for mount in mounts:
        run(["umount", str(mount)])
    for directory in etc_dirs(prefix):
        for child in directory.iterdir():
            child.unlink()
        directory.rmdir()
    runtime = RUNTIME_DIR / prefix
    if runtime.is_dir():
        for child in runtime.iterdir():
            child.unlink()
        runtime.rmdir()
