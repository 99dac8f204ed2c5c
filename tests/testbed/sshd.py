"""A real OpenSSH sshd per host, listening only on that host's address."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from tests.testbed.host import TestHost
from tests.testbed.network import TestBedError

SSHD = Path("/usr/sbin/sshd")
PRIVSEP_DIR = Path("/run/sshd")


def config_text(host: TestHost, authorized_keys: Path) -> str:
    return "\n".join(
        [
            f"ListenAddress {host.address}",
            "Port 22",
            f"HostKey {host.host_key}",
            "PidFile none",
            f"AuthorizedKeysFile {authorized_keys}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            # The shared test-bed directories are not owned the way StrictModes wants.
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            # ddptui opens many sessions at once (probes, tails); don't let sshd drop them.
            "MaxStartups 200",
            "MaxSessions 100",
            "AcceptEnv LANG LC_*",
            # A per-host HOME keeps the machine's own ~/.bashrc (which prepends to PATH) out of
            # the sessions, and gives each host its own "~" as separate machines have.
            f"SetEnv PATH={host.ssh_path} HOME={host.home} PYTHONPATH={host.python_dir} "
            f"DDPTUI_KERNEL_LOG={host.kernel_log}",
            # No SFTP, as on hardened sites and dropbear: ddptui needs only sessions.
            "LogLevel VERBOSE",
            "",
        ]
    )


def spawn(host: TestHost) -> None:
    """Start the host's sshd without waiting for it; see :func:`wait_ready`."""
    if running(host):
        return
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    with host.sshd_log.open("ab") as log:
        # -D keeps sshd in the foreground, so this Popen's pid *is* the listener
        # (ip netns exec and nsenter both exec): teardown kills exactly it.
        host.state.sshd = subprocess.Popen(
            [*host.exec_prefix(), str(SSHD), "-D", "-e", "-f", str(host.sshd_config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )


def wait_ready(hosts: Sequence[TestHost], timeout: float = 10.0) -> None:
    """Wait until every host's sshd sends its SSH banner on port 22."""
    deadline = time.monotonic() + timeout
    for host in hosts:
        while not _banner(host.address):
            proc = host.state.sshd
            if proc is None or proc.poll() is not None:
                raise TestBedError(
                    f"sshd on {host.name} exited: {host.sshd_log.read_text()[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise TestBedError(f"sshd on {host.name} not answering after {timeout} s")
            time.sleep(0.01)


def _banner(address: str) -> bool:
    try:
        with socket.create_connection((address, 22), timeout=0.5) as sock:
            return sock.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def start(host: TestHost) -> None:
    """Start the host's sshd (a no-op if it runs) and wait until it answers."""
    spawn(host)
    wait_ready([host])


def stop(host: TestHost) -> None:
    """Kill the host's sshd listener; sessions it already forked live on, as with systemd."""
    proc = host.state.sshd
    if proc is None:
        return
    proc.kill()
    proc.wait(timeout=5)
    host.state.sshd = None


def running(host: TestHost) -> bool:
    return listener_pid(host) is not None


def listener_pid(host: TestHost) -> int | None:
    proc = host.state.sshd
    return proc.pid if proc is not None and proc.poll() is None else None
