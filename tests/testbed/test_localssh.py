"""The fast tier: a real SSH server in-process on 127.0.0.1, usable without root."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import asyncssh
import pytest

from tests.testbed import LocalSshServer


async def _connect(server: LocalSshServer, key: Path | None = None) -> asyncssh.SSHClientConnection:
    return await asyncssh.connect(
        server.host,
        server.port,
        username=server.user,
        client_keys=[str(key or server.client_key)],
        known_hosts=str(server.known_hosts),
        agent_path=None,
        config=None,
    )


def test_exec_runs_in_home_with_stdin_exit_status_and_signals(
    local_ssh_server: LocalSshServer,
) -> None:
    async def session() -> list[asyncssh.SSHCompletedProcess]:
        async with await _connect(local_ssh_server) as conn:
            results = [
                await conn.run('echo "$HOME"; pwd; cat', input="from stdin\n"),
                await conn.run("echo oops >&2; exit 3"),
                await conn.run("kill -TERM $$"),
            ]
        return results

    shown, failed, killed = asyncio.run(session())
    home = str(local_ssh_server.home)
    assert (shown.exit_status, shown.stdout) == (0, f"{home}\n{home}\nfrom stdin\n")
    assert (failed.exit_status, failed.stderr) == (3, "oops\n")
    assert killed.exit_signal is not None and killed.exit_signal[0] == "TERM"
    assert local_ssh_server.commands == [
        'echo "$HOME"; pwd; cat',
        "echo oops >&2; exit 3",
        "kill -TERM $$",
    ]


def test_large_output_arrives_whole(local_ssh_server: LocalSshServer) -> None:
    async def session() -> asyncssh.SSHCompletedProcess:
        async with await _connect(local_ssh_server) as conn:
            result = await conn.run("head -c 3000000 /dev/zero | tr '\\0' x")
        return result

    assert asyncio.run(session()).stdout == "x" * 3_000_000


def test_it_offers_no_sftp_as_hardened_hosts_do(local_ssh_server: LocalSshServer) -> None:
    # ddptui stages code through sessions alone; a server with SFTP would hide a use of it.
    async def session() -> None:
        async with await _connect(local_ssh_server) as conn:
            with pytest.raises(asyncssh.ChannelOpenError):
                await conn.start_sftp_client()

    asyncio.run(session())


def test_an_untrusted_client_key_is_refused(
    local_ssh_server: LocalSshServer, tmp_path: Path
) -> None:
    stranger = tmp_path / "stranger"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(stranger))

    async def session() -> None:
        async with await _connect(local_ssh_server, key=stranger):
            pass

    with pytest.raises(asyncssh.PermissionDenied):
        asyncio.run(session())


def test_openssh_client_trusts_it_through_the_known_hosts_file(
    local_ssh_server: LocalSshServer,
) -> None:
    server = local_ssh_server
    result = subprocess.run(
        [
            "ssh",
            "-F",
            "none",
            "-p",
            str(server.port),
            "-i",
            str(server.client_key),
            "-o",
            f"UserKnownHostsFile={server.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            f"{server.user}@{server.host}",
            "echo",
            "interoperates",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (result.returncode, result.stdout) == (0, "interoperates\n"), result.stderr


def test_stop_drops_open_connections_and_refuses_new_ones(tmp_path: Path) -> None:
    server = LocalSshServer.start(tmp_path / "server")

    async def session() -> None:
        async with await _connect(server) as conn:
            assert (await conn.run("true")).exit_status == 0
            await asyncio.to_thread(server.stop)
            with pytest.raises((asyncssh.Error, OSError)):
                await conn.run("true", check=True)
        with pytest.raises(ConnectionRefusedError):
            await _connect(server)

    asyncio.run(session())
