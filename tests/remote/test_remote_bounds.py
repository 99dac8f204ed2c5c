"""RemoteCluster's own bounds: capped streams, and deadlines on every remote operation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.config.model import HostConfig
from ddptui.remote.commands import CommandResult, Overflow
from ddptui.remote.connection import RemoteCluster
from ddptui.remote.status import Reach
from ddptui.remote.stream import MAX_LINE_CHARS
from ddptui.remote.transport import RemoteError
from tests.helpers import Behaviour, HostileSshServer
from tests.remote.hosts import local_host
from tests.testbed import LocalSshServer

CONNECT_TIMEOUT_S = 2.0


def test_each_stream_is_capped_and_the_command_hung_up_on(
    local_ssh_server: LocalSshServer,
) -> None:
    host = local_host(local_ssh_server)

    def run(argv: list[str], **caps: int) -> CommandResult:
        # A connection each: the in-process server drops one whose command it cannot finish
        # writing to (sshd would not), which is not what is tested here.
        async def once() -> CommandResult:
            async with RemoteCluster([host], connect_timeout=5) as remote:
                return await remote.run(host, argv, timeout=30, **caps)

        return asyncio.run(once())

    loud = run(["sh", "-c", "yes >&2"], max_stderr=1000)
    assert loud.overflow == Overflow("stderr", 1000)
    assert loud.exit_status is None and len(loud.stderr) == 1000
    flood = run(["yes"], max_stdout=4096)
    assert str(flood.overflow) == "sent more than 4 KiB on stdout"
    assert flood.stdout == "y\n" * 2048
    quiet = run(["sh", "-c", "echo out; echo err >&2"])
    assert (quiet.exit_status, quiet.stdout, quiet.stderr, quiet.overflow) == (
        0,
        "out\n",
        "err\n",
        None,
    )


def test_a_line_without_end_comes_in_bounded_pieces(local_ssh_server: LocalSshServer) -> None:
    host = local_host(local_ssh_server)
    length = 3 * MAX_LINE_CHARS + 10

    async def scenario() -> list[str]:
        async with RemoteCluster([host], connect_timeout=5) as remote:
            process = await remote.start_process(
                host, ["python3", "-c", f"print('x' * {length}, end='', flush=True)"]
            )
            pieces = [line async for line in process.lines()]
            await process.close()
            return pieces

    pieces = asyncio.run(scenario())
    assert "".join(pieces) == "x" * length
    assert max(len(piece) for piece in pieces) == MAX_LINE_CHARS


@pytest.fixture
def swallowing(tmp_path: Path) -> Iterator[HostileSshServer]:
    with HostileSshServer.start(tmp_path / "server", Behaviour.SWALLOW) as server:
        yield server


def hostile_host(server: HostileSshServer) -> HostConfig:
    return HostConfig(
        name="swallower",
        address=server.host,
        port=server.port,
        user="anyone",
        identity_file=server.client_key,
        known_hosts=server.known_hosts,
    )


def test_every_operation_on_a_host_that_never_opens_a_channel_ends_in_time(
    swallowing: HostileSshServer,
) -> None:
    host = hostile_host(swallowing)

    async def scenario() -> list[float]:
        took = []
        async with RemoteCluster([host], connect_timeout=CONNECT_TIMEOUT_S) as remote:
            began = time.monotonic()
            result = await remote.run(host, ["true"], timeout=60)
            took.append(time.monotonic() - began)
            assert result.reach is not None and result.reach.reach is Reach.ERROR
            assert "did not open a session within 2 s" in result.stderr
            began = time.monotonic()
            with pytest.raises(RemoteError, match="within 2 s"):
                await remote.start_process(host, ["true"])
            took.append(time.monotonic() - began)
        return took

    began = time.monotonic()
    took = asyncio.run(scenario())
    assert all(seconds < 2 * CONNECT_TIMEOUT_S for seconds in took), took
    assert time.monotonic() - began < 4 * CONNECT_TIMEOUT_S
    assert swallowing.channel_opens >= 2
