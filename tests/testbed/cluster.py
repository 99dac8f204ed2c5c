"""The test bed: N hosts on one machine, each a network + UTS namespace running OpenSSH sshd."""

from __future__ import annotations

import fcntl
import ipaddress
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import IO

import tomli_w

from tests.testbed import faults, keys, network, sshd
from tests.testbed.host import TestHost, run_on
from tests.testbed.network import RUNTIME_DIR, TestBedError

MARKER = ".ddptui-testbed"
"""Marks a root directory as the test bed's, so ``start`` may wipe it."""
MASTER_PORT = 29500
BED_TORCH_IMPORT_TIMEOUT_S = 90
"""The suite's two workers each run a bed on two shared cores; beside a bed's ranks, an
``import torch`` took over the default 20 s in CI, and the check then (rightly) refused."""
_EMPTY: Mapping[str, object] = MappingProxyType({})
_NO_OVERRIDES: Mapping[str, Mapping[str, object]] = MappingProxyType({})


class TestBedBusy(TestBedError):
    """Another live process holds a test bed with this prefix."""

    __test__ = False


class TestBed:
    """A running test bed; build one with :meth:`start`, end it with :meth:`stop`."""

    __test__ = False

    user = "root"

    def __init__(
        self,
        prefix: str,
        root: Path,
        subnet: ipaddress.IPv4Network,
        hosts: list[TestHost],
        lock: IO[bytes],
    ) -> None:
        self.prefix = prefix
        self.root = root
        self.subnet = subnet
        self.gateway = str(subnet.network_address + 1)
        """The head node's (this process's) address on the test-bed bridge."""
        self.hosts = hosts
        self.identity_file = root / "client" / "id_ed25519"
        self.known_hosts = root / "client" / "known_hosts"
        self.python = sys.executable
        self.up_seconds = 0.0
        self._lock = lock
        self._inodes: set[int] = set()

    @classmethod
    def start(cls, n_hosts: int, root: Path, prefix: str = "ddpt") -> TestBed:
        """Bring up ``n_hosts`` hosts, after removing leftovers of a dead run with this prefix.

        Raises :class:`TestBedBusy` if a live process owns the prefix, :class:`TestBedError`
        if the machine cannot host one (see :func:`why_unavailable`) or bring-up fails.
        """
        began = time.monotonic()
        network.check_prefix(prefix)
        if not 1 <= n_hosts <= 200:
            raise TestBedError(f"n_hosts must be 1..200, got {n_hosts}")
        reason = why_unavailable()
        if reason is not None:
            raise TestBedError(reason)
        lock = _lock_prefix(prefix)
        bed: TestBed | None = None
        try:
            network.remove(prefix)
            _prepare_root(root)
            # Held until the bridge owns the subnet, so concurrent beds never pick the same one.
            with _subnet_lock():
                subnet = network.choose_subnet()
                hosts = _describe_hosts(prefix, root, subnet, n_hosts)
                bed = cls(prefix, root, subnet, hosts, lock)
                network.build_network(prefix, subnet, [_link(i, h) for i, h in enumerate(hosts)])
            bed._start_hosts()
        except BaseException:
            if bed is not None:
                bed.stop()
            else:
                network.remove(prefix)
                lock.close()
            raise
        bed.up_seconds = time.monotonic() - began
        return bed

    def _start_hosts(self) -> None:
        self._create_uts()
        self._inodes = network.namespace_inodes(
            path for host in self.hosts for path in host.namespace_files()
        )
        self._write_keys_and_configs()
        for host in self.hosts:
            sshd.spawn(host)
        sshd.wait_ready(self.hosts)

    def _create_uts(self) -> None:
        script = []
        for host in self.hosts:
            host.uts_file.touch()
            host.etc_hosts.parent.mkdir(parents=True, exist_ok=True)
            # Written before any process enters the namespace: ip netns exec binds it at start.
            host.etc_hosts.write_text(host.etc_hosts_text("normal"))
            script.append(
                shlex.join(["unshare", f"--uts={host.uts_file}", "hostname", host.hostname])
            )
        network.run(["sh", "-ec", "\n".join(script)])

    def _write_keys_and_configs(self) -> None:
        client_public = keys.write_key_pair(self.identity_file, "ddptui-testbed-client")
        authorized_keys = self.root / "client" / "authorized_keys"
        authorized_keys.write_text(client_public + "\n")
        lines = []
        for host in self.hosts:
            public = keys.write_key_pair(host.host_key, host.hostname)
            host.state.original_host_key = host.host_key.read_bytes()
            lines.append(keys.known_hosts_line(host.address, 22, public))
            host.sshd_config.write_text(sshd.config_text(host, authorized_keys))
        self.known_hosts.write_text("\n".join(lines) + "\n")

    def stop(self) -> None:
        """Kill every process on the hosts and remove namespaces, links and mounts (idempotent)."""
        if self._lock.closed:
            # Stopped already: the prefix may belong to another test bed by now.
            return
        for host in self.hosts:
            for holder in list(host.state.held_ports):
                holder.release()
        network.remove(self.prefix, self._inodes)
        for host in self.hosts:
            proc = host.state.sshd
            if proc is not None:
                # Already killed with everything else in its namespaces; reap it.
                proc.wait(timeout=5)
                host.state.sshd = None
        self._lock.close()

    def restore(self) -> None:
        """Undo every fault on every host (see :func:`tests.testbed.faults.restore`)."""
        faults.restore(self.hosts)

    def residue(self) -> list[str]:
        """What is left of this test bed on the machine; empty after a clean :meth:`stop`."""
        found = network.leftovers(self.prefix)
        found += [f"process {pid}" for pid in network.pids_in(self._inodes)]
        return found

    def host(self, name: str) -> TestHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def run_on(
        self,
        host: TestHost,
        argv: Sequence[str],
        *,
        timeout: float = 30,
        check: bool = False,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside ``host``'s namespaces directly (not over SSH)."""
        return run_on(host, argv, timeout=timeout, check=check, input=input)

    def ssh_options(self) -> list[str]:
        """OpenSSH client options for the bed: its key only, strict host keys, no prompts."""
        return [
            "-i",
            str(self.identity_file),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
        ]

    def ssh_argv(
        self, host: TestHost, argv: Sequence[str], *, connect_timeout: int = 3
    ) -> list[str]:
        """An OpenSSH client command running ``argv`` on ``host``, strict host keys, no prompts."""
        return [
            "ssh",
            "-F",
            "none",
            *self.ssh_options(),
            "-o",
            f"ConnectTimeout={connect_timeout}",
            f"{self.user}@{host.address}",
            "--",
            shlex.join(argv),
        ]

    def ssh(
        self,
        host: TestHost,
        argv: Sequence[str],
        *,
        timeout: float = 30,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on ``host`` through the real OpenSSH client."""
        return subprocess.run(
            self.ssh_argv(host, argv),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def write_hosts_file(
        self,
        path: Path,
        hosts: Sequence[TestHost] | None = None,
        *,
        cluster: Mapping[str, object] = _EMPTY,
        host_overrides: Mapping[str, Mapping[str, object]] = _NO_OVERRIDES,
        job: Mapping[str, object] = _EMPTY,
    ) -> Path:
        """Write a ddptui hosts file for ``hosts`` (default: all); overrides win, key by key.

        ``host_overrides`` is keyed by host name.
        """
        document = {
            "cluster": {
                "user": self.user,
                "identity_file": str(self.identity_file),
                "known_hosts": str(self.known_hosts),
                "python": self.python,
                "backend": "gloo",
                "master_port": MASTER_PORT,
                "connect_timeout": 3,
                # Every bed host imports torch on the head's cores, beside the other bed's ranks.
                "torch_import_timeout": BED_TORCH_IMPORT_TIMEOUT_S,
                **cluster,
            },
            "hosts": [
                {
                    "name": host.name,
                    "address": host.address,
                    "workdir": str(host.workdir),
                    **host_overrides.get(host.name, {}),
                }
                for host in (self.hosts if hosts is None else hosts)
            ],
            "job": {"nproc_per_node": 2, **job},
        }
        path.write_text(tomli_w.dumps(document))
        return path


def why_unavailable() -> str | None:
    """Why this machine cannot host a test bed (not root, a tool missing…); None if it can.

    ``DDPTUI_TESTBED=off`` in the environment turns the test bed off, as on a machine without
    root, so the fallback can be exercised anywhere.
    """
    if os.environ.get("DDPTUI_TESTBED") == "off":
        return "turned off by DDPTUI_TESTBED=off"
    if os.geteuid() != 0:
        return f"network namespaces need root (running as uid {os.geteuid()})"
    for tool in ("ip", "nsenter", "unshare", str(sshd.SSHD)):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install iproute2 util-linux openssh-server)"
    probe = f"ddptprobe{os.getpid()}"
    added = network.run(["ip", "netns", "add", probe], check=False)
    if added.returncode != 0:
        return f"cannot create a network namespace: {added.stderr.strip()}"
    network.run(["ip", "netns", "del", probe])
    return None


def _lock_prefix(prefix: str) -> IO[bytes]:
    RUNTIME_DIR.mkdir(parents=True, exist_ok=True)
    lock = (RUNTIME_DIR / f"{prefix}.lock").open("wb")
    try:
        # Held for the test bed's life; the kernel drops it when its owner dies, which is
        # what tells a crashed run's leftovers from a concurrent run's live hosts.
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise TestBedBusy(f"another process runs a test bed with prefix {prefix!r}") from None
    return lock


@contextmanager
def _subnet_lock() -> Iterator[None]:
    """Serialises choosing a subnet and claiming it (bridge address), across processes."""
    RUNTIME_DIR.mkdir(parents=True, exist_ok=True)
    with (RUNTIME_DIR / "subnet.lock").open("wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _prepare_root(root: Path) -> None:
    if root.exists() and any(root.iterdir()):
        if not (root / MARKER).exists():
            raise TestBedError(f"{root} is not empty and not a test-bed directory")
        shutil.rmtree(root)
    (root / "client").mkdir(parents=True)
    (root / MARKER).touch()


def _describe_hosts(
    prefix: str, root: Path, subnet: ipaddress.IPv4Network, n_hosts: int
) -> list[TestHost]:
    runtime = RUNTIME_DIR / prefix
    runtime.mkdir(parents=True, exist_ok=True)
    names = [
        (f"node{i}", f"{prefix}-node{i}", str(subnet.network_address + 10 + i))
        for i in range(n_hosts)
    ]
    cluster_names = tuple((address, hostname) for _, hostname, address in names)
    hosts = []
    for i, (name, hostname, address) in enumerate(names):
        directory = root / "hosts" / name
        for sub in ("work", "bin", "home", "python"):
            (directory / sub).mkdir(parents=True)
        (directory / "kmsg").touch()
        netns = f"{prefix}-{name}"
        hosts.append(
            TestHost(
                name=name,
                hostname=hostname,
                address=address,
                netns=netns,
                workdir=directory / "work",
                bin_dir=directory / "bin",
                veth=f"{prefix}-v{i}",
                directory=directory,
                uts_file=runtime / f"{name}.uts",
                etc_hosts=network.NETNS_ETC / netns / "hosts",
                cluster_names=cluster_names,
            )
        )
    return hosts


def _link(index: int, host: TestHost) -> network.HostLink:
    return network.HostLink(
        netns=host.netns,
        veth=host.veth,
        address=host.address,
        mac=network.host_mac(index),
    )
