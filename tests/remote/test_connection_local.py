"""The connection pool against a real SSH server on 127.0.0.1 (asyncssh, in-process).

Every failure mode that does not need separate machines: host keys, authentication, DNS,
refused and silent ports, dropped connections, commands, uploads.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import subprocess
import sys
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import asyncssh
import pytest

from ddptui.config.model import HostConfig
from ddptui.remote.commands import classify_python_failure, posix_script, python_argv
from ddptui.remote.connection import RemoteCluster
from ddptui.remote.hostkeys import fingerprint, key_line
from ddptui.remote.status import Reach, Reachability
from ddptui.remote.transport import HostUnreachable
from tests.remote.hosts import local_host
from tests.testbed import LocalSshServer

T = TypeVar("T")
PRINT_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def connect_once(host: HostConfig, timeout: float = 5) -> Reachability:
    async with RemoteCluster([host], connect_timeout=timeout) as cluster:
        return await cluster.connect(host)


def server_key(server: LocalSshServer) -> asyncssh.SSHKey:
    return asyncssh.import_public_key(" ".join(server.known_hosts.read_text().split()[1:3]))


def other_key_line(
    server: LocalSshServer, algorithm: str = "ssh-ed25519"
) -> tuple[asyncssh.SSHKey, str]:
    """A key the server does not have, and the known_hosts line recording it for the server."""
    key = asyncssh.generate_private_key(algorithm).convert_to_public()
    return key, key_line(server.host, server.port, key)


def write_key(path: Path, passphrase: str = "") -> asyncssh.SSHKey:
    """An ed25519 key pair made by OpenSSH's ssh-keygen (as users make theirs)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(path), "-C", path.name],
        check=True,
    )
    return asyncssh.read_public_key(str(path) + ".pub")


def test_connects_runs_and_quotes_argv(local_ssh_server: LocalSshServer) -> None:
    host = local_host(local_ssh_server)
    argv = [sys.executable, "-c", PRINT_ARGV, "a b", "$HOME", "it's", ";", "*"]

    async def scenario() -> None:
        async with RemoteCluster([host], connect_timeout=5) as cluster:
            assert (await cluster.connect_all()) == {"local": Reachability(Reach.OK, mock_any)}
            result = await cluster.run(host, argv, timeout=10)
            assert json.loads(result.stdout) == argv[3:]
            # The login shell gets one quoted word; the POSIX script inside runs argv as given.
            login_word = local_ssh_server.commands[-1]
            encoded = login_word.removeprefix("sh -c 'eval \"$(echo ").split(" ")[0]
            assert base64.b64decode(encoded).decode() == posix_script(argv)
            failed = await cluster.run(
                host, ["sh", "-c", "cat; echo oops >&2; exit 3"], input="in\n", timeout=10
            )
            assert (failed.exit_status, failed.stdout, failed.stderr) == (3, "in\n", "oops\n")

    run(scenario())


class _Any(str):
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str)

    __hash__ = str.__hash__


mock_any = _Any()


def test_an_unknown_host_key_is_refused_and_shown(local_ssh_server: LocalSshServer) -> None:
    empty = local_ssh_server.root / "empty_known_hosts"
    empty.touch()
    reach = run(connect_once(local_host(local_ssh_server, known_hosts=empty)))
    assert reach.reach is Reach.HOSTKEY_UNKNOWN
    assert fingerprint(server_key(local_ssh_server)) in reach.detail
    assert "ddptui trust" in reach.detail


def test_a_missing_known_hosts_file_means_unknown(local_ssh_server: LocalSshServer) -> None:
    missing = local_ssh_server.root / "no" / "known_hosts"
    reach = run(connect_once(local_host(local_ssh_server, known_hosts=missing)))
    assert reach.reach is Reach.HOSTKEY_UNKNOWN


def test_the_default_known_hosts_is_home_ssh(
    local_ssh_server: LocalSshServer, client_home: Path
) -> None:
    (client_home / ".ssh").mkdir()
    (client_home / ".ssh" / "known_hosts").write_text(local_ssh_server.known_hosts.read_text())
    reach = run(connect_once(local_host(local_ssh_server, known_hosts=None)))
    assert reach.ok, reach


def test_a_changed_host_key_is_refused_loudly(local_ssh_server: LocalSshServer) -> None:
    server = local_ssh_server
    impostor, line = other_key_line(server)
    recorded = server.root / "changed_known_hosts"
    recorded.write_text(f"# ours\n{line}\n")
    reach = run(connect_once(local_host(server, known_hosts=recorded)))
    assert reach.reach is Reach.HOSTKEY_CHANGED
    assert "REMOTE HOST KEY CHANGED" in reach.detail and "man-in-the-middle" in reach.detail
    assert f"remove the old line 2 from {recorded}" in reach.detail
    assert fingerprint(server_key(server)) in reach.detail
    assert fingerprint(impostor) in reach.detail


def test_a_key_recorded_system_wide_is_trusted_and_a_changed_one_named_there(
    local_ssh_server: LocalSshServer, system_known_hosts: Path
) -> None:
    server = local_ssh_server
    empty = server.root / "empty_known_hosts"
    empty.touch()
    host = local_host(server, known_hosts=empty)
    system_known_hosts.parent.mkdir()
    system_known_hosts.write_text(server.known_hosts.read_text())
    reach = run(connect_once(host))
    assert reach.ok, reach

    _, line = other_key_line(server)
    system_known_hosts.write_text(f"# managed by the cluster's admins\n\n{line}\n")
    reach = run(connect_once(host))
    assert reach.reach is Reach.HOSTKEY_CHANGED, reach
    assert f"remove the old line 3 from {system_known_hosts}" in reach.detail

    system_known_hosts.write_text("")
    reach = run(connect_once(host))
    assert reach.reach is Reach.HOSTKEY_UNKNOWN, reach
    assert f"is not in {empty} or {system_known_hosts} (" in reach.detail


def test_a_host_key_of_another_type_on_record_is_a_changed_key(
    local_ssh_server: LocalSshServer,
) -> None:
    # The server has only an ed25519 key; on record is an ECDSA one. A strict connection
    # negotiates only the recorded type, so this fails in key exchange, not verification.
    server = local_ssh_server
    _, line = other_key_line(server, "ecdsa-sha2-nistp256")
    recorded = server.root / "ecdsa_known_hosts"
    recorded.write_text(f"{line}\n")
    reach = run(connect_once(local_host(server, known_hosts=recorded)))
    assert reach.reach is Reach.HOSTKEY_CHANGED, reach
    assert "line 1" in reach.detail


def test_a_wrong_key_is_auth_failed_naming_the_key(local_ssh_server: LocalSshServer) -> None:
    wrong = write_key(local_ssh_server.root / "wrong_key")
    reach = run(
        connect_once(
            local_host(local_ssh_server, identity_file=local_ssh_server.root / "wrong_key")
        )
    )
    assert reach.reach is Reach.AUTH_FAILED
    assert fingerprint(wrong) in reach.detail
    assert "wrong_key" in reach.detail


def test_a_passphrase_protected_key_is_skipped_not_prompted(
    local_ssh_server: LocalSshServer,
) -> None:
    locked = local_ssh_server.root / "locked_key"
    write_key(locked, passphrase="secret")
    reach = run(connect_once(local_host(local_ssh_server, identity_file=locked)))
    assert reach.reach is Reach.AUTH_FAILED
    assert f"{locked} (skipped: passphrase-protected" in reach.detail


def test_a_missing_identity_file_is_this_machine_s_problem(
    local_ssh_server: LocalSshServer,
) -> None:
    missing = local_ssh_server.root / "no_such_key"
    reach = run(connect_once(local_host(local_ssh_server, identity_file=missing)))
    assert reach.reach is Reach.KEY_UNUSABLE
    assert f"cannot use identity_file {missing}" in reach.detail


def test_no_key_at_all_is_auth_failed(local_ssh_server: LocalSshServer) -> None:
    reach = run(connect_once(local_host(local_ssh_server, identity_file=None)))
    assert reach.reach is Reach.AUTH_FAILED
    assert "no key to offer" in reach.detail


def test_ssh_config_is_honoured(local_ssh_server: LocalSshServer, client_home: Path) -> None:
    server = local_ssh_server
    (client_home / ".ssh").mkdir(mode=0o700)
    (client_home / ".ssh" / "config").write_text(
        f"Host {server.host}\n  IdentityFile {server.client_key}\n  User {server.user}\n"
    )
    reach = run(connect_once(local_host(server, identity_file=None, user=None)))
    assert reach.ok, reach


async def _cipher(host: HostConfig) -> str:
    """The cipher a connection to ``host`` agreed on with the server."""
    async with RemoteCluster([host], connect_timeout=5) as cluster:
        connection = await cluster._require(host)
        return str(connection.get_extra_info("send_cipher"))


def test_aes_gcm_is_agreed_on_unless_the_users_config_names_its_ciphers(
    local_ssh_server: LocalSshServer, client_home: Path
) -> None:
    server = local_ssh_server
    # OpenSSH's sshd offers ChaCha20-Poly1305 first; ddptui's preference decides.
    assert run(_cipher(local_host(server))) == "aes128-gcm@openssh.com"
    (client_home / ".ssh").mkdir(mode=0o700)
    (client_home / ".ssh" / "config").write_text(
        f"Host {server.host}\n  Ciphers chacha20-poly1305@openssh.com\n"
    )
    assert run(_cipher(local_host(server))) == "chacha20-poly1305@openssh.com"


@pytest.fixture
def ssh_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real OpenSSH ssh-agent, exported through SSH_AUTH_SOCK."""
    socket_path = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket_path)], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 5
    while not socket_path.exists():
        assert time.monotonic() < deadline, "ssh-agent did not start"
        time.sleep(0.01)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(socket_path))
    yield socket_path
    agent.terminate()
    agent.wait(timeout=5)


def ssh_add(agent: Path, key: Path) -> None:
    subprocess.run(
        ["ssh-add", str(key)], env={"SSH_AUTH_SOCK": str(agent)}, check=True, capture_output=True
    )


def test_the_agent_is_honoured(local_ssh_server: LocalSshServer, ssh_agent: Path) -> None:
    ssh_add(ssh_agent, local_ssh_server.client_key)
    reach = run(connect_once(local_host(local_ssh_server, identity_file=None)))
    assert reach.ok, reach


def test_agent_keys_offered_are_named(local_ssh_server: LocalSshServer, ssh_agent: Path) -> None:
    wrong = write_key(local_ssh_server.root / "agent_wrong")
    ssh_add(ssh_agent, local_ssh_server.root / "agent_wrong")
    reach = run(connect_once(local_host(local_ssh_server, identity_file=None)))
    assert reach.reach is Reach.AUTH_FAILED
    assert f"agent: agent_wrong (ssh-ed25519 {fingerprint(wrong)})" in reach.detail


def test_the_identity_file_is_read_once_a_connection(
    local_ssh_server: LocalSshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # asyncssh makes options anew from options, reading every key file again each time:
    # three reads a host, a fifth of a check's time at 128 hosts.
    read = asyncssh.public_key.read_file
    reads: list[str] = []

    def counted(path: Any, *args: Any) -> Any:
        reads.append(str(path))
        return read(path, *args)

    monkeypatch.setattr(asyncssh.public_key, "read_file", counted)
    reach = run(connect_once(local_host(local_ssh_server)))
    assert reach.ok, reach
    assert reads.count(str(local_ssh_server.client_key)) == 1


@pytest.mark.parametrize("identities_only", [False, True])
def test_identities_only_keeps_agent_keys_other_than_the_identity_file_out(
    local_ssh_server: LocalSshServer, ssh_agent: Path, client_home: Path, identities_only: bool
) -> None:
    # The keys are loaded once and handed on to the options made after; the agent keys
    # IdentitiesOnly allows must be handed on with them, or the agent's key would be offered.
    ssh_add(ssh_agent, local_ssh_server.client_key)
    other = local_ssh_server.root / "not_authorized"
    write_key(other)
    ssh = client_home / ".ssh"
    ssh.mkdir(mode=0o700)
    (ssh / "config").write_text(f"IdentitiesOnly {'yes' if identities_only else 'no'}\n")
    reach = run(connect_once(local_host(local_ssh_server, identity_file=other)))
    assert reach.reach is (Reach.AUTH_FAILED if identities_only else Reach.OK), reach


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_closed_port_is_refused() -> None:
    host = HostConfig(name="gone", address="127.0.0.1", port=free_port())
    reach = run(connect_once(host))
    assert reach.reach is Reach.REFUSED
    assert "gone" in reach.detail


def test_an_unresolvable_name_is_dns_failed() -> None:
    reach = run(connect_once(HostConfig(name="typo", address="gpu-a.invalid")))
    assert reach.reach is Reach.DNS_FAILED
    assert "gpu-a.invalid" in reach.detail


def test_a_port_that_never_speaks_times_out_on_time() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        host = HostConfig(name="mute", address="127.0.0.1", port=silent.getsockname()[1])
        began = time.monotonic()
        reach = run(connect_once(host, timeout=1.0))
        elapsed = time.monotonic() - began
    assert reach.reach is Reach.TIMEOUT
    # Not before its timeout; the bound above only catches a connect that never gives up (a
    # tight one would fail by the machine's load, not by ddptui).
    assert 1.0 <= elapsed < 30


def test_commands_on_an_unreachable_host_say_why() -> None:
    host = HostConfig(name="gone", address="127.0.0.1", port=free_port())

    async def scenario() -> None:
        async with RemoteCluster([host], connect_timeout=5) as cluster:
            result = await cluster.run(host, ["true"], timeout=5)
            assert result.exit_status is None
            assert result.reach is not None and result.reach.reach is Reach.REFUSED
            with pytest.raises(HostUnreachable) as raised:
                await cluster.start_process(host, ["true"])
            assert raised.value.reachability.reach is Reach.REFUSED

    run(scenario())


def test_a_missing_python_is_python_missing(local_ssh_server: LocalSshServer) -> None:
    host = local_host(local_ssh_server, python="/opt/none/bin/python3")

    async def scenario() -> None:
        async with RemoteCluster([host], connect_timeout=5) as cluster:
            result = await cluster.run(host, python_argv(host, "-V"), timeout=10)
            reach = classify_python_failure(host, result)
            assert reach is not None and reach.reach is Reach.PYTHON_MISSING
            assert "/opt/none/bin/python3" in reach.detail

    run(scenario())


def test_a_started_process_streams_its_lines(local_ssh_server: LocalSshServer) -> None:
    host = local_host(local_ssh_server)

    async def scenario() -> None:
        async with RemoteCluster([host], connect_timeout=5) as cluster:
            process = await cluster.start_process(
                host, ["sh", "-c", 'echo one; sleep 0.3; echo "$GREETING"'], env={"GREETING": "two"}
            )
            lines = [line async for line in process.lines()]
            await process.close()
            assert lines == ["one\n", "two\n"]
            assert process.exit_status == 0

    run(scenario())
