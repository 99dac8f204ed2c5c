"""``ddptui trust`` and the connection agree on which key a host has and where it is kept.

The command runs as the user runs it; the connection is ddptui's own, in this process. Both
read the same ``~/.ssh/config`` (in the test's HOME), so an alias, a revoked key and a host
certificate each get one verdict.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest
import tomli_w

from ddptui.config.model import HostConfig
from ddptui.remote.connection import RemoteCluster
from ddptui.remote.hostkeys import fingerprint
from ddptui.remote.status import Reach, Reachability
from tests.helpers import Behaviour, HostileSshServer
from tests.remote.hosts import local_host
from tests.testbed import LocalSshServer


def trust(hosts: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "ddptui", "trust", str(hosts), "--yes"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def check(hosts: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "ddptui", "check", "--json", str(hosts)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def write_hosts(path: Path, host: HostConfig) -> Path:
    entry: dict[str, object] = {"name": host.name, "address": host.address, "port": host.port}
    cluster: dict[str, object] = {"connect_timeout": 5, "python": sys.executable}
    if host.user is not None:
        cluster["user"] = host.user
    if host.identity_file is not None:
        cluster["identity_file"] = str(host.identity_file)
    if host.known_hosts is not None:
        cluster["known_hosts"] = str(host.known_hosts)
    document = {"cluster": cluster, "hosts": [entry], "job": {"nproc_per_node": 1}}
    path.write_text(tomli_w.dumps(document))
    return path


def connect(host: HostConfig) -> Reachability:
    async def once() -> Reachability:
        async with RemoteCluster([host], connect_timeout=5) as remote:
            return await remote.connect(host)

    return asyncio.run(once())


def server_fingerprint(server: LocalSshServer) -> str:
    public = " ".join(server.known_hosts.read_text().split()[1:3])
    return fingerprint(asyncssh.import_public_key(public))


def ssh_config(home: Path, text: str) -> None:
    (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
    (home / ".ssh" / "config").write_text(text)


@pytest.mark.parametrize(
    ("alias", "recorded_as"),
    [("", "[127.0.0.1]:{port}"), ("HostKeyAlias gpu-a-key", "gpu-a-key")],
    ids=["hostname", "host-key-alias"],
)
def test_a_host_behind_a_config_alias_is_recorded_where_the_connection_looks(
    local_ssh_server: LocalSshServer,
    client_home: Path,
    tmp_path: Path,
    alias: str,
    recorded_as: str,
) -> None:
    ssh_config(client_home, f"Host gpu-a\n  HostName 127.0.0.1\n  {alias}\n")
    known_hosts = tmp_path / "known_hosts"
    host = local_host(local_ssh_server, address="gpu-a", known_hosts=known_hosts)
    hosts = write_hosts(tmp_path / "hosts.toml", host)
    assert connect(host).reach is Reach.HOSTKEY_UNKNOWN

    first = trust(hosts)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"{server_fingerprint(local_ssh_server)}  new" in first.stdout
    pattern = recorded_as.format(port=local_ssh_server.port)
    assert known_hosts.read_text().split()[0] == pattern

    assert connect(host).ok
    again = trust(hosts)
    assert again.returncode == 0 and "already trusted" in again.stdout


def test_user_known_hosts_file_from_the_config_is_read_and_written(
    local_ssh_server: LocalSshServer, client_home: Path, tmp_path: Path
) -> None:
    configured = tmp_path / "configured_known_hosts"
    ssh_config(client_home, f"Host 127.0.0.1\n  UserKnownHostsFile {configured}\n")
    host = local_host(local_ssh_server, known_hosts=None)
    hosts = write_hosts(tmp_path / "hosts.toml", host)

    result = trust(hosts)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"to {configured}" in result.stdout
    assert not (client_home / ".ssh" / "known_hosts").exists()
    assert connect(host).ok


def test_known_hosts2_counts_as_openssh_reads_it(
    local_ssh_server: LocalSshServer, client_home: Path, tmp_path: Path
) -> None:
    (client_home / ".ssh").mkdir(mode=0o700)
    (client_home / ".ssh" / "known_hosts2").write_text(local_ssh_server.known_hosts.read_text())
    host = local_host(local_ssh_server, known_hosts=None)
    assert connect(host).ok
    result = trust(write_hosts(tmp_path / "hosts.toml", host))
    assert result.returncode == 0 and "already trusted" in result.stdout


def test_a_revoked_key_is_never_added_and_never_connected_to(
    local_ssh_server: LocalSshServer, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "known_hosts"
    recorded = local_ssh_server.known_hosts.read_text()
    known_hosts.write_text(f"@revoked {recorded}")
    host = local_host(local_ssh_server, known_hosts=known_hosts)
    hosts = write_hosts(tmp_path / "hosts.toml", host)

    result = trust(hosts)
    assert result.returncode == 1
    assert "REVOKED" in result.stdout and "@revoked" in result.stderr
    assert known_hosts.read_text() == f"@revoked {recorded}"

    reach = connect(host)
    assert reach.reach is Reach.HOSTKEY_REVOKED, reach.detail
    assert '"code": "host_key_revoked"' in check(hosts).stdout

    # A plain line trusting the same key (any port) does not undo the revocation.
    key = " ".join(recorded.split()[1:3])
    known_hosts.write_text(f"@revoked {recorded}127.0.0.1 {key}\n")
    assert connect(host).reach is Reach.HOSTKEY_REVOKED
    result = trust(hosts)
    assert result.returncode == 1 and "REVOKED" in result.stdout


@pytest.fixture
def certified(tmp_path: Path) -> Iterator[tuple[HostileSshServer, asyncssh.SSHKey]]:
    authority = asyncssh.generate_private_key("ssh-ed25519")
    root = tmp_path / "certified"
    with HostileSshServer.start(root, Behaviour.ANSWER, authority=authority) as server:
        yield server, authority


def test_a_host_certified_by_a_trusted_authority_is_trusted_by_both(
    certified: tuple[HostileSshServer, asyncssh.SSHKey], tmp_path: Path
) -> None:
    server, authority = certified
    known_hosts = tmp_path / "known_hosts"
    ca_line = authority.export_public_key().decode().strip()
    known_hosts.write_text(f"@cert-authority [127.0.0.1]:{server.port} {ca_line}\n")
    host = HostConfig(
        name="certified",
        address=server.host,
        port=server.port,
        user="anyone",
        identity_file=server.client_key,
        known_hosts=known_hosts,
    )
    hosts = write_hosts(tmp_path / "hosts.toml", host)

    result = trust(hosts)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "certificate signed by a @cert-authority" in result.stdout
    assert "added" not in result.stdout
    assert connect(host).ok

    # The same host key without a certificate the authority signed is just an unknown key.
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    known_hosts.write_text(f"@cert-authority [127.0.0.1]:{server.port} {other}\n")
    assert connect(host).reach is Reach.HOSTKEY_UNKNOWN
    assert "  new" in trust(hosts).stdout
