"""``ddptui trust`` end to end on the test bed, judged by OpenSSH's own strict client."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import asyncssh

from ddptui.remote.hostkeys import fingerprint
from tests.testbed import TestBed, TestHost, rotate_host_key, stop_sshd


def trust(
    hosts_file: Path, home: Path, *args: str, answer: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real command; with ``answer``, stdin is a terminal that types it."""
    argv = [sys.executable, "-m", "ddptui", "trust", str(hosts_file), *args]
    env = {**os.environ, "HOME": str(home)}
    if answer is None:
        return subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=60
        )
    main, terminal = os.openpty()
    try:
        proc = subprocess.Popen(
            argv, stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        os.write(main, answer.encode() + b"\n")
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(terminal)
        os.close(main)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def hosts_file(bed: TestBed, tmp_path: Path, known_hosts: Path) -> Path:
    return bed.write_hosts_file(tmp_path / "hosts.toml", cluster={"known_hosts": str(known_hosts)})


def host_fingerprint(host: TestHost) -> str:
    # From the private key sshd loads: the test bed's restore does not rewrite the .pub file.
    return fingerprint(asyncssh.read_private_key(host.host_key).convert_to_public())


def openssh_accepts(bed: TestBed, host: TestHost, known_hosts: Path) -> bool:
    argv = [
        f"UserKnownHostsFile={known_hosts}" if arg.startswith("UserKnownHostsFile=") else arg
        for arg in bed.ssh_argv(host, ["true"])
    ]
    return subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0


def test_yes_records_every_key_and_openssh_then_connects_strictly(
    testbed: TestBed, tmp_path: Path, client_home: Path
) -> None:
    known_hosts = client_home / ".ssh" / "known_hosts"
    hosts = hosts_file(testbed, tmp_path, known_hosts)
    assert not any(openssh_accepts(testbed, host, known_hosts) for host in testbed.hosts)

    first = trust(hosts, client_home, "--yes")
    assert first.returncode == 0, first.stderr
    for host in testbed.hosts:
        assert f"{host.name}  {host.address}:22  ssh-ed25519 {host_fingerprint(host)}  new" in (
            first.stdout
        )
    assert f"added 4 keys to {known_hosts}" in first.stdout
    assert stat.S_IMODE(known_hosts.stat().st_mode) == 0o600
    assert stat.S_IMODE(known_hosts.parent.stat().st_mode) == 0o700
    assert all(openssh_accepts(testbed, host, known_hosts) for host in testbed.hosts)

    recorded = known_hosts.read_bytes()
    again = trust(hosts, client_home, "--yes")
    assert again.returncode == 0
    assert again.stdout.count("already trusted") == 4
    assert known_hosts.read_bytes() == recorded


def test_a_changed_key_is_refused_and_never_replaced(
    testbed: TestBed, tmp_path: Path, client_home: Path
) -> None:
    known_hosts = tmp_path / "known_hosts"
    shutil.copy(testbed.known_hosts, known_hosts)
    before = known_hosts.read_bytes()
    rotate_host_key(testbed.hosts[1])
    result = trust(hosts_file(testbed, tmp_path, known_hosts), client_home, "--yes")
    assert result.returncode == 1
    assert f"node1  {testbed.hosts[1].address}:22  ssh-ed25519 " in result.stdout
    assert "CHANGED: refusing to replace the recorded key" in result.stdout
    assert "REMOTE HOST KEY CHANGED for node1" in result.stderr
    assert f"remove the old line 2 from {known_hosts}" in result.stderr
    assert result.stdout.count("already trusted") == 3
    assert known_hosts.read_bytes() == before


def test_without_a_terminal_it_needs_yes(
    testbed: TestBed, tmp_path: Path, client_home: Path
) -> None:
    known_hosts = tmp_path / "known_hosts"
    result = trust(hosts_file(testbed, tmp_path, known_hosts), client_home)
    assert result.returncode == 2
    assert "use --yes" in result.stderr
    assert result.stdout.count("  new") == 4  # the fingerprints are still shown
    assert not known_hosts.exists()


def test_on_a_terminal_it_asks(testbed: TestBed, tmp_path: Path, client_home: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    hosts = hosts_file(testbed, tmp_path, known_hosts)
    declined = trust(hosts, client_home, answer="n")
    assert declined.returncode == 1
    assert f"Add 4 keys to {known_hosts}? [y/N]" in declined.stderr
    assert not known_hosts.exists()
    accepted = trust(hosts, client_home, answer="y")
    assert accepted.returncode == 0, accepted.stderr
    assert all(openssh_accepts(testbed, host, known_hosts) for host in testbed.hosts)


def test_only_unknown_keys_are_added_and_unreachable_hosts_fail(
    testbed: TestBed, tmp_path: Path, client_home: Path
) -> None:
    known_hosts = tmp_path / "known_hosts"
    node0_line = testbed.known_hosts.read_text().splitlines()[0]
    known_hosts.write_text(node0_line + "\n")
    stop_sshd(testbed.hosts[3])
    result = trust(hosts_file(testbed, tmp_path, known_hosts), client_home, "--yes")
    assert result.returncode == 1
    assert "node0" in result.stdout and "already trusted" in result.stdout
    assert f"node3  {testbed.hosts[3].address}:22  unreachable: " in result.stdout
    assert "refused" in result.stdout
    assert f"added 2 keys to {known_hosts}" in result.stdout
    lines = known_hosts.read_text().splitlines()
    assert lines[0] == node0_line and len(lines) == 3
    assert all(openssh_accepts(testbed, host, known_hosts) for host in testbed.hosts[:3])
