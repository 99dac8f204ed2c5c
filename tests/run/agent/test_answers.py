"""Whatever a host answers the node agent's commands, the head gets a typed value or a
NodeError naming the host, and one host's garbage never keeps the others from being stopped.

The real client functions (:mod:`ddptui.run.agent.client`) and the real stopper and launcher
run against in-process SSH servers (:attr:`Behaviour.AGENT`) that answer each agent command
with a document of the test's choosing; one test runs the real agent through a real local
server, so the checks are known to accept what the agent sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.remote.connection import RemoteCluster
from ddptui.run.agent import client as nodes
from ddptui.run.agent.answers import AttemptStatus
from ddptui.run.agent.call import GarbledAnswer, NodeError, kept_agents
from ddptui.run.backends.ssh.launcher import LaunchError, start_attempt
from ddptui.run.record import RunRecord
from ddptui.run.stopper import StopReport, stop_nodes, terminate
from tests.helpers import Behaviour, HostileSshServer
from tests.remote.hosts import local_host
from tests.run.bed import one_rank_a_host_record
from tests.testbed import LocalSshServer

CONNECT_TIMEOUT_S = 5.0
RUN_DIR = "/nonexistent/ddptui-runs/20990101-000000-host"
DEEP = 100_000
"""Nesting the JSON parser refuses (RecursionError)."""
NESTED = 500
"""Nesting the JSON parser accepts, and str() or repr() of the result might not."""
TORCHRUN = ["torchrun", "--master-port=29500", "--log-dir=logs", "-m", "trainer"]


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def sane_attempt(**fields: Any) -> dict[str, Any]:
    return {"pgid": 4242, "alive": True, "exit": None, "processes": [[4243, "python3"]]} | fields


def attempts(*entries: tuple[str, Any]) -> str:
    return json.dumps({"attempts": dict(entries), "time": 1.0})


GARBAGE = {
    "superscript attempt": attempts(("²", sane_attempt())),
    "arabic-indic attempt": attempts(("٣", sane_attempt())),
    "attempt with ten digits": attempts(("1234567890", sane_attempt())),
    "attempt 0": attempts(("0", sane_attempt())),
    "attempt after the record's": attempts(("2", sane_attempt())),
    "process not a pair": attempts(("1", sane_attempt(processes=[7]))),
    "process of three": attempts(("1", sane_attempt(processes=[[1, 2, 3]]))),
    "processes not a list": attempts(("1", sane_attempt(processes={"1": "x"}))),
    "pid 1": attempts(("1", sane_attempt(processes=[[1, "init"]]))),
    "pid past pid_max": attempts(("1", sane_attempt(processes=[[1 << 22, "x"]]))),
    "pid a bool": attempts(("1", sane_attempt(processes=[[True, "x"]]))),
    "name not text": attempts(("1", sane_attempt(processes=[[4243, ["x"]]]))),
    "pgid 0": attempts(("1", sane_attempt(pgid=0))),
    "pgid huge": attempts(("1", sane_attempt(pgid=10**30))),
    "pgid a float": attempts(("1", sane_attempt(pgid=4242.0))),
    "exit past 255": attempts(("1", sane_attempt(exit=256))),
    "alive not a bool": attempts(("1", sane_attempt(alive=1))),
    "ranks negative": attempts(("1", sane_attempt(ranks=-1))),
    "ranks text": attempts(("1", sane_attempt(ranks="1"))),
    "attempt not an object": attempts(("1", [4242])),
    "attempts a list": json.dumps({"attempts": [[1, 2, 3]]}),
    "list of lists": "[[1,2,3]]",
    "a string": '"attempts"',
    "a number": "7",
    "null": "null",
    "no JSON": "Welcome to ddpa2! \x1b]0;owned\x07",
    "an integer of 5000 digits": '{"pgid": ' + "9" * 5000 + "}",
    "infinity": '{"pgid": 1e999, "port": 1e999}',
    "NaN": '{"pgid": NaN, "port": NaN}',
    "too deep to parse": deep(DEEP),
    "deep inside": json.dumps(
        {"attempts": {"1": sane_attempt(processes=json.loads(deep(NESTED)))}}
    ),
    "error not text": '{"error": ' + deep(NESTED) + "}",
    "signalled not a list": '{"signalled": {"attempt": 1}}',
    "signalled attempt after the record's": json.dumps(
        {"signalled": [{"attempt": 2, "processes": ["python3"]}]}
    ),
    "signalled name not text": json.dumps(
        {"signalled": [{"attempt": 1, "processes": [deep(3), 7]}]}
    ),
    "port 0": '{"port": 0}',
    "port past 65535": '{"port": 65536}',
    "a port not the one asked for": '{"port": 22}',
    "everything a bool": '{"attempts": true, "signalled": true, "pgid": true, "port": true}',
}
"""Answers every one of status, send_signal, free_port and start must refuse: each document
is garbage for all four (none holds a sane value under the key another command reads)."""

CALLS: dict[str, Callable[[RemoteCluster, HostConfig], Awaitable[object]]] = {
    "status": lambda remote, host: nodes.status(remote, host, RUN_DIR, attempts=1),
    "signal": lambda remote, host: nodes.send_signal(remote, host, RUN_DIR, "TERM", attempts=1),
    "free-port": lambda remote, host: nodes.free_port(remote, host, 29500),
    "start": lambda remote, host: nodes.start(remote, host, RUN_DIR, 1, {}, ["python3"]),
}


def agent_host(server: HostileSshServer, name: str = "ddpa2") -> HostConfig:
    return HostConfig(
        name=name,
        address=server.host,
        port=server.port,
        user="anyone",
        identity_file=server.client_key,
        known_hosts=server.known_hosts,
    )


@pytest.fixture
def answering(tmp_path: Path) -> Iterator[HostileSshServer]:
    with HostileSshServer.start(tmp_path / "server", Behaviour.AGENT) as server:
        yield server


def call_all(
    server: HostileSshServer, document: str, *, kept: bool = False
) -> dict[str, BaseException | object]:
    """What each client function gave for ``document``: its value, or what it raised; asked
    one-shot, or all of a ``kept`` agent."""
    server.agent = lambda args: document.encode() + b"\n"
    host = agent_host(server)

    async def scenario() -> dict[str, BaseException | object]:
        outcomes: dict[str, BaseException | object] = {}
        async with (
            RemoteCluster([host], connect_timeout=CONNECT_TIMEOUT_S) as remote,
            kept_agents(remote, [host]) if kept else contextlib.nullcontext(),
        ):
            for command, call in CALLS.items():
                try:
                    outcomes[command] = await call(remote, host)
                except BaseException as error:  # anything at all: the test says what it was
                    outcomes[command] = error
        return outcomes

    return asyncio.run(scenario())


@pytest.mark.parametrize("kept", [False, True], ids=["one-shot", "kept"])
@pytest.mark.parametrize("document", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_is_a_node_error_naming_the_host_for_every_command(
    answering: HostileSshServer, document: str, kept: bool
) -> None:
    outcomes = call_all(answering, document, kept=kept)
    for command, outcome in outcomes.items():
        assert isinstance(outcome, GarbledAnswer), (command, outcome)
        message = str(outcome)
        assert message.startswith(f"ddpa2 answered garbage to {command}: "), message
        assert message.isprintable() and len(message) < 200, message
    # Garbage is the host's answer, not a broken kept agent: every command still went to it.
    asked = [args[1:] if kept else args for args in answering.asked]
    assert [args[0] for args in asked] == list(CALLS)
    assert all((args[0] == "serve") is kept for args in answering.asked)


@pytest.mark.parametrize("kept", [False, True], ids=["one-shot", "kept"])
def test_an_error_answer_is_the_hosts_words_and_sane_answers_are_typed(
    answering: HostileSshServer, kept: bool
) -> None:
    said = call_all(answering, '{"error": "port 29500 is not free \\u001b[2J"}', kept=kept)
    assert {command: str(error) for command, error in said.items()} == dict.fromkeys(
        CALLS, "ddpa2: port 29500 is not free \\x1b[2J"
    )
    assert all(type(error) is NodeError for error in said.values())
    sane = {
        "attempts": {
            "1": sane_attempt(processes=[[4243, "python3"], [4244, "pt_\x1bmain"]], ranks=1)
        },
        "signalled": [{"attempt": 0, "processes": ["torchrun"]}],
        "port": 29500,
        "pgid": 4242,
    }
    assert call_all(answering, json.dumps(sane), kept=kept) == {
        "status": [
            AttemptStatus(1, 4242, True, None, ((4243, "python3"), (4244, "pt_\\x1bmain")), 1)
        ],
        "signal": ["torchrun"],
        "free-port": 29500,
        "start": 4242,
    }


def test_the_real_agents_answers_pass_the_checks(
    local_ssh_server: LocalSshServer, tmp_path: Path
) -> None:
    host = local_host(local_ssh_server)
    run_dir = str(tmp_path / "run")
    Path(run_dir, "code").mkdir(parents=True)

    async def scenario() -> None:
        async with RemoteCluster([host], connect_timeout=CONNECT_TIMEOUT_S) as remote:
            port = await nodes.free_port(remote, host)
            assert await nodes.free_port(remote, host, port) == port
            pgid = await nodes.start(remote, host, run_dir, 1, {}, ["sleep", "60"])
            try:
                [started] = await nodes.status(remote, host, run_dir, attempts=1)
                assert (started.attempt, started.pgid, started.alive) == (1, pgid, True)
                assert "sleep" in {name for _, name in started.processes}
                assert started.ranks == 0
            finally:
                reached = await nodes.send_signal(remote, host, run_dir, "KILL", attempts=1)
            assert "sleep" in reached
            [ended] = await nodes.status(remote, host, run_dir, wait=10, attempts=1)
            assert not ended.alive and not ended.processes

    asyncio.run(scenario())


def test_the_environment_reaches_the_command_but_never_a_command_line(
    local_ssh_server: LocalSshServer, tmp_path: Path
) -> None:
    # Its values may be tokens (WANDB_API_KEY, HF_TOKEN), and any user of the host reads
    # every process's command line in ps.
    host = local_host(local_ssh_server)
    run_dir = tmp_path / "run"
    Path(run_dir, "code").mkdir(parents=True)
    token = "tok-8f3a61c2"
    command_lines: list[str] = []

    async def scenario() -> None:
        async with RemoteCluster([host], connect_timeout=CONNECT_TIMEOUT_S) as remote:
            run = remote.run

            async def recorded(host: HostConfig, argv: Sequence[str], **options: Any) -> Any:
                command_lines.append(" ".join(argv))
                return await run(host, argv, **options)

            remote.run = recorded  # type: ignore[method-assign]
            said = 'printf %s "$DDPTUI_TEST_TOKEN" > ../said'
            await nodes.start(
                remote, host, str(run_dir), 1, {"DDPTUI_TEST_TOKEN": token}, ["sh", "-c", said]
            )
            await nodes.status(remote, host, str(run_dir), wait=10, attempts=1)

    asyncio.run(scenario())
    assert (run_dir / "said").read_text() == token
    assert command_lines and not [line for line in command_lines if token in line]


# --- one hostile host among healthy ones ---------------------------------------------------


class SaneAgent:
    """A node agent answering as the real one: attempt 1 runs until it gets a signal, and
    every signal is kept."""

    def __init__(self) -> None:
        self.signals: list[str] = []
        self.control: list[str] = []

    def __call__(self, args: list[str]) -> bytes:
        command = args[0]
        if command == "signal":
            reached = [] if self.signals else [{"attempt": 1, "processes": ["torchrun"]}]
            self.signals.append(args[2])
            return self._say({"signalled": reached})
        if command == "control":
            self.control.append(args[2])
            return self._say({"created": args[2]})
        if command == "start":
            return self._say({"pgid": 4242})
        if command in ("status", "wait"):
            processes = [] if self.signals else [[4242, "torchrun"]]
            exit_status = 143 if self.signals else None
            attempt = sane_attempt(alive=bool(processes), exit=exit_status, processes=processes)
            return self._say({"attempts": {"1": attempt}, "time": 1.0})
        return self._say({"error": f"unknown command {command}"})

    @staticmethod
    def _say(document: object) -> bytes:
        return json.dumps(document).encode() + b"\n"


def two_hosts(
    tmp_path: Path, garbage: str
) -> Iterator[tuple[SaneAgent, HostileSshServer, HostileSshServer, Config, RunRecord]]:
    healthy_agent = SaneAgent()

    def hostile_answers(args: list[str]) -> bytes:
        return garbage.encode() + b"\n"

    with (
        HostileSshServer.start(
            tmp_path / "healthy", Behaviour.AGENT, agent=healthy_agent
        ) as healthy,
        HostileSshServer.start(
            tmp_path / "hostile", Behaviour.AGENT, agent=hostile_answers
        ) as hostile,
    ):
        hosts = (agent_host(healthy, "ddpa1"), agent_host(hostile, "ddpa2"))
        config = Config(
            Path("hosts.toml"),
            ClusterConfig(connect_timeout=CONNECT_TIMEOUT_S),
            hosts,
            JobConfig(stop_grace_s=1.0),
        )
        record = one_rank_a_host_record(
            "20990101-000000-host", hosts, [RUN_DIR] * len(hosts), TORCHRUN
        )
        yield healthy_agent, healthy, hostile, config, record


@pytest.fixture
def processes_seven(
    tmp_path: Path,
) -> Iterator[tuple[SaneAgent, HostileSshServer, HostileSshServer, Config, RunRecord]]:
    yield from two_hosts(tmp_path, attempts(("1", sane_attempt(processes=[7]))))


def assert_names_the_hostile_host(report: StopReport, hostile: HostileSshServer) -> None:
    assert list(report.garbled) == ["ddpa2"] and not report.unreachable
    assert report.garbled["ddpa2"].startswith("ddpa2 answered garbage to ")
    assert not report.clean
    assert any(line.startswith("ddpa2 answered garbage to ") for line in report.lines())
    # Its processes are not known: it is sent the signals all the same.
    assert ["signal", RUN_DIR, "TERM"] in hostile.asked
    assert ["signal", RUN_DIR, "KILL"] in hostile.asked


def test_terminate_stops_the_healthy_host_and_names_the_hostile_one(
    processes_seven: tuple[SaneAgent, HostileSshServer, HostileSshServer, Config, RunRecord],
) -> None:
    healthy_agent, _, hostile, config, record = processes_seven

    async def scenario() -> StopReport:
        async with RemoteCluster.for_config(config) as remote:
            return await terminate(remote, config, record, grace=1.0)

    report = asyncio.run(scenario())
    assert healthy_agent.signals == ["TERM"]
    assert report.terminated["ddpa1"] == ["torchrun"]
    assert "ddpa1" not in report.left
    assert_names_the_hostile_host(report, hostile)


def test_stop_stops_the_healthy_host_and_names_the_hostile_one(
    processes_seven: tuple[SaneAgent, HostileSshServer, HostileSshServer, Config, RunRecord],
) -> None:
    healthy_agent, _, hostile, config, record = processes_seven
    said: list[str] = []

    async def scenario() -> StopReport:
        async with RemoteCluster.for_config(config) as remote:
            return await stop_nodes(remote, config, record, graceful=True, say=said.append)

    report = asyncio.run(scenario())
    # Node 0 is healthy: asked to checkpoint and stop, then signalled once the grace is over.
    assert healthy_agent.control == ["stop"]
    assert healthy_agent.signals == ["TERM"]
    assert not report.graceful
    assert_names_the_hostile_host(report, hostile)


def test_a_start_with_a_hostile_host_names_it_and_kills_what_started(
    processes_seven: tuple[SaneAgent, HostileSshServer, HostileSshServer, Config, RunRecord],
) -> None:
    healthy_agent, _, hostile, config, record = processes_seven

    async def scenario() -> None:
        async with RemoteCluster.for_config(config) as remote:
            await start_attempt(remote, config, record, 1, 29500, say=lambda line: None)

    with pytest.raises(LaunchError) as raised:
        asyncio.run(scenario())
    assert str(raised.value).startswith("start failed: ddpa2 answered garbage to start: ")
    assert "ddpa1" not in str(raised.value)
    assert healthy_agent.signals == ["KILL"]
    assert ["signal", RUN_DIR, "KILL"] in hostile.asked


def test_a_bug_reading_one_hosts_answer_is_that_hosts_finding(
    processes_seven: tuple[SaneAgent, HostileSshServer, HostileSshServer, Config, RunRecord],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Defence in depth: should a check ever raise something else, the stop goes on."""
    healthy_agent, _, _, config, record = processes_seven
    real_status = nodes.status

    async def status(remote: RemoteCluster, host: HostConfig, *args: Any, **kw: Any) -> Any:
        if host.name == "ddpa2":
            raise TypeError("cannot unpack non-iterable int object")
        return await real_status(remote, host, *args, **kw)

    monkeypatch.setattr(nodes, "status", status)

    async def scenario() -> StopReport:
        async with RemoteCluster.for_config(config) as remote:
            return await terminate(remote, config, record, grace=1.0)

    report = asyncio.run(scenario())
    assert healthy_agent.signals == ["TERM"]
    assert report.garbled == {
        "ddpa2": "ddpa2: unexpected TypeError: cannot unpack non-iterable int object"
    }
    assert not report.clean
