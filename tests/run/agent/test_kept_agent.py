"""A node agent kept running on a host for a launch's commands (``serve``): what the real one
answers is what a one-shot agent answers, in one session; and a host that breaks the kept
agent's protocol (no end line, a dead channel, a flood, no hello) costs that command a
:class:`NodeError` naming the host, and the next command goes one-shot.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from ddptui.config.model import HostConfig
from ddptui.remote.connection import RemoteCluster
from ddptui.run.agent import client as nodes
from ddptui.run.agent.call import MAX_ANSWER_BYTES, NodeError, agent, kept_agents
from tests.helpers import Behaviour, HostileSshServer, served
from tests.remote.hosts import local_host
from tests.run.agent.test_answers import CONNECT_TIMEOUT_S, RUN_DIR, agent_host
from tests.testbed import LocalSshServer

PORT_ANSWER = b'{"port": 29500}\n'


def outcome(call: Awaitable[object]) -> Awaitable[object]:
    async def settled() -> object:
        try:
            return await call
        except NodeError as error:
            return f"NodeError: {error}"

    return settled()


def test_the_real_kept_agent_answers_as_one_shot_agents_do_in_one_session(
    local_ssh_server: LocalSshServer, tmp_path: Path
) -> None:
    host = local_host(local_ssh_server)
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        busy = taken.getsockname()[1]

        async def errors(remote: RemoteCluster) -> list[object]:
            return [
                await outcome(nodes.free_port(remote, host, busy)),
                await outcome(agent(remote, host, "status")),
                await outcome(agent(remote, host, "nope")),
            ]

        async def lifetime(remote: RemoteCluster, run_dir: str) -> list[object]:
            Path(run_dir, "code").mkdir(parents=True)
            pgid = await nodes.start(remote, host, run_dir, 1, {}, ["sleep", "60"])
            [started] = await nodes.status(remote, host, run_dir, attempts=1)
            # Until its shell wrapper has started sleep: a kept agent asks fast enough to find
            # the wrapper alone.
            deadline = time.monotonic() + 10
            while not any(name == "sleep" for _, name in started.processes):
                assert time.monotonic() < deadline, started
                await asyncio.sleep(0.05)
                [started] = await nodes.status(remote, host, run_dir, attempts=1)
            reached = await nodes.send_signal(remote, host, run_dir, "KILL", attempts=1)
            [ended] = await nodes.status(remote, host, run_dir, wait=10, attempts=1)
            again = await outcome(nodes.start(remote, host, run_dir, 1, {}, ["sleep", "60"]))
            return [
                started.pgid == pgid and started.alive,
                "sleep" in reached,
                ended.alive,
                ended.exit,
                str(again).replace(run_dir, "RUN"),
            ]

        async def scenario() -> None:
            async with RemoteCluster([host], connect_timeout=CONNECT_TIMEOUT_S) as remote:
                one_shot = await errors(remote)
                one_shot_life = await lifetime(remote, str(tmp_path / "one-shot"))
                sessions = len(local_ssh_server.commands)
                async with kept_agents(remote, [host]):
                    kept = await errors(remote)
                    kept_life = await lifetime(remote, str(tmp_path / "kept"))
                    following = await outcome(agent(remote, host, "follow", RUN_DIR))
                    assert len(local_ssh_server.commands) == sessions + 1
                # The block is over: one-shot again.
                await nodes.free_port(remote, host)
                assert len(local_ssh_server.commands) == sessions + 2
            assert kept == one_shot
            assert kept_life == one_shot_life
            assert kept_life[:3] == [True, True, False]
            assert "was already started" in str(kept_life[4])
            assert "port" in str(kept[0]) and "is not free" in str(kept[0])
            assert "failed: IndexError" in str(kept[1]) and "unknown command" in str(kept[2])
            # A command that would hold the kept agent is refused there.
            assert following == "NodeError: local: follow is not served"

        asyncio.run(scenario())


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[HostileSshServer]:
    with HostileSshServer.start(tmp_path / "server", Behaviour.AGENT) as server:
        server.agent = lambda args: PORT_ANSWER
        yield server


def ask_twice(
    server: HostileSshServer, first: Callable[[RemoteCluster, HostConfig], Awaitable[object]]
) -> tuple[object, object]:
    """What ``first`` gave inside a kept block, then what a free-port asked after it gave."""
    host = agent_host(server)

    async def scenario() -> tuple[object, object]:
        async with (
            RemoteCluster([host], connect_timeout=CONNECT_TIMEOUT_S) as remote,
            kept_agents(remote, [host]),
        ):
            said = await outcome(first(remote, host))
            return said, await outcome(nodes.free_port(remote, host))

    return asyncio.run(scenario())


def test_a_kept_agent_that_never_ends_its_answer_times_out_and_the_next_command_is_one_shot(
    serving: HostileSshServer,
) -> None:
    serving.kept = lambda args: PORT_ANSWER
    said, then = ask_twice(serving, lambda remote, host: agent(remote, host, "x", timeout=1))
    assert said == "NodeError: ddpa2: the node agent (x) did not answer in 1 s"
    assert then == 29500
    assert serving.asked == [["serve", "x"], ["free-port", "0"]]


@pytest.mark.parametrize("lost", ["channel", "connection"])
def test_a_kept_agent_lost_mid_command_is_a_node_error_and_the_next_is_one_shot(
    serving: HostileSshServer, lost: str
) -> None:
    # A lost connection used to escape as asyncssh's ConnectionLost, past every caller.
    def dies(args: list[str]) -> bytes:
        if lost == "connection":
            for connection in list(serving._connections):
                connection.abort()
        raise ConnectionResetError

    serving.kept = dies
    said, then = ask_twice(serving, lambda remote, host: nodes.free_port(remote, host))
    assert str(said).startswith("NodeError: ddpa2: the node agent (free-port) was lost: ")
    assert then == 29500
    assert serving.asked == [["serve", "free-port", "0"], ["free-port", "0"]]


@pytest.mark.parametrize(
    "flood",
    [b"x" * (MAX_ANSWER_BYTES + 2), b"{}\n" * (MAX_ANSWER_BYTES // 3 + 1)],
    ids=["one line", "many lines"],
)
def test_a_kept_agent_that_floods_is_garbage_and_the_next_command_is_one_shot(
    serving: HostileSshServer, flood: bytes
) -> None:
    serving.kept = lambda args: served(flood)
    said, then = ask_twice(serving, lambda remote, host: nodes.free_port(remote, host))
    assert str(said).startswith("NodeError: ddpa2")
    assert len(str(said)) < 300
    assert then == 29500


def test_an_end_line_that_is_not_serves_is_part_of_the_answer(
    serving: HostileSshServer,
) -> None:
    serving.kept = lambda args: PORT_ANSWER + b'{"served": "0"}\n' + served(b"")
    said, then = ask_twice(serving, lambda remote, host: nodes.free_port(remote, host))
    assert str(said).startswith("NodeError: ddpa2 answered garbage to free-port: ")
    assert then == said
    # Garbage, but in step: the kept agent is still asked.
    assert serving.asked == [["serve", "free-port", "0"], ["serve", "free-port", "0"]]


@pytest.mark.parametrize(
    "hello",
    [b"", b"Welcome!\n", b'{"serving": "yes"}\n', b"x" * (MAX_ANSWER_BYTES + 2)],
    ids=["nothing", "a banner only", "not a pid", "a flood"],
)
def test_a_host_whose_kept_agent_never_says_it_serves_is_asked_one_shot(
    serving: HostileSshServer, hello: bytes
) -> None:
    serving.hello, serving.serves = hello, False
    said, then = ask_twice(serving, lambda remote, host: nodes.free_port(remote, host))
    assert (said, then) == (29500, 29500)
    assert serving.asked == [["free-port", "0"], ["free-port", "0"]]


def test_a_login_banner_before_the_hello_is_passed_over(serving: HostileSshServer) -> None:
    serving.hello = b"Welcome to ddpa2! \x1b]0;owned\x07\n" + json.dumps({"serving": 7}).encode()
    serving.hello += b"\n"
    said, then = ask_twice(serving, lambda remote, host: nodes.free_port(remote, host))
    assert (said, then) == (29500, 29500)
    assert serving.asked == [["serve", "free-port", "0"], ["serve", "free-port", "0"]]
