"""A host that answers and then never confirms a channel's close hangs no one.

Every close of a channel waits at most the connect timeout for the host to confirm, then
aborts the connection (:func:`ddptui.remote.stream.close_within`); closing the connections
themselves is bounded the same way. The server (:attr:`Behaviour.UNCLOSING`) answers each
command, sends its exit status and EOF, and ignores the client's close.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.config.model import HostConfig
from ddptui.remote.connection import RemoteCluster
from ddptui.run.following.files import FOLLOWING_KEEPALIVE
from tests.helpers import Behaviour, HostileSshServer

CONNECT_TIMEOUT_S = 2.0
"""Also the deadline of every channel close (RemoteCluster passes it on)."""
SLACK_S = 2.0
ANSWER = b'{"k":"hb","time":1}\n{"k":"hb","time":2}\n'


@pytest.fixture
def unclosing(tmp_path: Path) -> Iterator[HostileSshServer]:
    with HostileSshServer.start(tmp_path / "server", Behaviour.UNCLOSING, answer=ANSWER) as server:
        yield server


def unclosing_host(server: HostileSshServer) -> HostConfig:
    return HostConfig(
        name="ddpa2",
        address=server.host,
        port=server.port,
        user="anyone",
        identity_file=server.client_key,
        known_hosts=server.known_hosts,
    )


def test_closing_a_stream_the_host_never_confirms_ends_by_its_deadline(
    unclosing: HostileSshServer,
) -> None:
    host = unclosing_host(unclosing)

    async def scenario() -> tuple[list[bytes], float, float]:
        async with RemoteCluster([host], connect_timeout=CONNECT_TIMEOUT_S) as remote:
            stream = await remote.open_stream(host, ["follow"], input="", max_line=1024)
            lines = [line async for line in stream.lines()]
            began = time.monotonic()
            await stream.close()
            closing = time.monotonic() - began
            # The aborted connection is not reused: the next command gets a new one.
            began = time.monotonic()
            result = await remote.run(host, ["status"], timeout=30)
            assert (result.exit_status, result.stdout) == (0, ANSWER.decode())
            return lines, closing, time.monotonic() - began

    lines, closing, next_command = asyncio.run(scenario())
    assert lines == ANSWER.splitlines()
    assert unclosing.ignored_closes == 2
    assert unclosing.connections_made == 2
    assert closing < CONNECT_TIMEOUT_S + SLACK_S
    # The command's own close is left unconfirmed as well, and bounded the same way.
    assert next_command < CONNECT_TIMEOUT_S + SLACK_S


def test_closing_the_connections_with_unconfirmed_channels_ends_by_its_deadline(
    unclosing: HostileSshServer,
) -> None:
    host = unclosing_host(unclosing)

    async def scenario() -> float:
        remote = RemoteCluster([host], connect_timeout=CONNECT_TIMEOUT_S)
        stream = await remote.open_stream(host, ["follow"], input="", max_line=1024)
        assert [line async for line in stream.lines()] == ANSWER.splitlines()
        began = time.monotonic()
        await remote.close()
        return time.monotonic() - began

    assert asyncio.run(scenario()) < CONNECT_TIMEOUT_S + SLACK_S


def test_a_follower_reconnecting_to_a_host_that_never_confirms_closes_ends_in_time(
    unclosing: HostileSshServer,
) -> None:
    """What :class:`ddptui.run.following.files.HostFollower` does at each reconnect: its own
    cluster, a stream, the stream closed, then the cluster."""
    host = unclosing_host(unclosing)

    async def scenario() -> list[float]:
        took = []
        for _ in range(2):
            remote = RemoteCluster(
                [host],
                connect_timeout=CONNECT_TIMEOUT_S,
                keepalive_interval=FOLLOWING_KEEPALIVE.interval_s,
                keepalive_count_max=FOLLOWING_KEEPALIVE.count_max,
            )
            assert (await remote.connect(host)).ok
            stream = await remote.open_stream(host, ["follow"], input="", max_line=1024)
            async for _line in stream.lines():
                break
            began = time.monotonic()
            await stream.close()
            await remote.close()
            took.append(time.monotonic() - began)
        return took

    took = asyncio.run(scenario())
    assert unclosing.ignored_closes == 2 and unclosing.connections_made == 2
    assert all(seconds < CONNECT_TIMEOUT_S + SLACK_S for seconds in took), took
