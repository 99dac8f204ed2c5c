"""One host of the test bed: what tests read, plus the state the fault helpers change."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias

from tests.testbed.network import HOST_IFNAME

NameResolution: TypeAlias = Literal["normal", "loopback", "missing"]
"""How a host resolves a hostname of the bed (its own, or a peer's): the right address,
127.0.1.1 (the Debian trap), or not at all."""

STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(eq=False)
class HostState:
    """What faults changed on a host, so that restoring touches only what needs it."""

    sshd: subprocess.Popen[bytes] | None = None
    original_host_key: bytes = b""
    key_rotated: bool = False
    held_ports: list[PortHolder] = field(default_factory=list)
    firewalled: bool = False
    limited: bool = False


@dataclass(eq=False)
class TestHost:
    """A machine of the test bed: its own network stack, hostname, sshd and directories."""

    __test__ = False

    name: str
    """The name ddptui shows ("node0"); not the hostname."""
    hostname: str
    """The UTS hostname its processes see, distinct per host."""
    address: str
    netns: str
    workdir: Path
    """This host's own run directory (hosts share one filesystem, not their directories)."""
    bin_dir: Path
    """First on PATH in SSH sessions on this host and in :func:`run_on`; where doubles go."""
    veth: str
    """The bridge end of its link, in the root namespace; taking it down cuts the host off."""
    directory: Path
    uts_file: Path
    etc_hosts: Path
    """``/etc/netns/NETNS/hosts``: this host's ``/etc/hosts``."""
    cluster_names: tuple[tuple[str, str], ...]
    """(address, hostname) of every host: each host's /etc/hosts lists the whole cluster."""
    ifname: str = HOST_IFNAME
    state: HostState = field(default_factory=HostState)

    @property
    def host_key(self) -> Path:
        return self.directory / "ssh_host_ed25519_key"

    @property
    def sshd_config(self) -> Path:
        return self.directory / "sshd_config"

    @property
    def sshd_log(self) -> Path:
        return self.directory / "sshd.log"

    @property
    def home(self) -> Path:
        """HOME of SSH sessions on this host: remote ``~`` paths land here."""
        return self.directory / "home"

    @property
    def python_dir(self) -> Path:
        """First on PYTHONPATH in SSH sessions on this host and in :func:`run_on`: where
        doubles of Python modules go (a recorded ``pynvml``)."""
        return self.directory / "python"

    @property
    def kernel_log(self) -> Path:
        """What the node agent reads as this host's kernel log (``DDPTUI_KERNEL_LOG``): the
        bed's hosts share one kernel, and a test writes a GPU's Xid into one host's alone."""
        return self.directory / "kmsg"

    @property
    def ssh_path(self) -> str:
        """PATH of SSH sessions on this host."""
        return f"{self.bin_dir}:{STANDARD_PATH}"

    def namespace_files(self) -> list[Path]:
        return [Path("/run/netns") / self.netns, self.uts_file]

    def exec_prefix(self) -> list[str]:
        """argv prefix that runs a command inside this host's network and UTS namespaces."""
        return ["ip", "netns", "exec", self.netns, "nsenter", f"--uts={self.uts_file}", "--"]

    def etc_hosts_text(self, mode: NameResolution, name: str | None = None) -> str:
        """This host's /etc/hosts with ``mode`` applied to ``name`` (default: its hostname)."""
        changed = self.hostname if name is None else name
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        for address, hostname in self.cluster_names:
            if hostname != changed or mode == "normal":
                lines.append(f"{address} {hostname}")
            elif mode == "loopback":
                lines.append(f"127.0.1.1 {hostname}")
        return "\n".join(lines) + "\n"


def run_on(
    host: TestHost,
    argv: Sequence[str],
    *,
    timeout: float = 30,
    check: bool = False,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` on ``host`` directly (not over SSH), with its /etc/hosts, PATH and HOME.

    For setting up and asserting; a non-zero exit raises only with ``check``.
    """
    env = {
        **os.environ,
        "PATH": host.ssh_path,
        "HOME": str(host.home),
        "PYTHONPATH": str(host.python_dir),
        "DDPTUI_KERNEL_LOG": str(host.kernel_log),
    }
    proc = subprocess.run(
        [*host.exec_prefix(), *argv],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if check and proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout, proc.stderr)
    return proc


class PortHolder:
    """A listening TCP socket inside a host's namespace, held by a helper process."""

    def __init__(self, host: TestHost, port: int) -> None:
        self.host = host
        self.port = port
        self._proc = subprocess.Popen(
            [*host.exec_prefix(), sys.executable, "-c", _HOLD_PORT, str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        if self._proc.stdout.readline().strip() != "listening":
            _, err = self._proc.communicate(timeout=5)
            raise OSError(f"could not occupy {host.name}:{port}: {err.strip()}")
        host.state.held_ports.append(self)

    def release(self) -> None:
        """Close the socket (idempotent)."""
        if self._proc.poll() is None:
            self._proc.communicate(input="", timeout=5)
        if self in self.host.state.held_ports:
            self.host.state.held_ports.remove(self)

    def __enter__(self) -> PortHolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# Binds the wildcard address so the port is taken for every address of the host, and keeps it
# until stdin closes (the holder's release, or the test process dying).
# SO_REUSEADDR as servers set it: a port whose last connections linger in TIME_WAIT (a run
# that just ended) can still be held.
_HOLD_PORT = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
print("listening", flush=True)
sys.stdin.read()
"""
