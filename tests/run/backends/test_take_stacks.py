"""Where a backend asks for the ranks' stacks (:meth:`RunBackend.take_stacks`): each host
followed through the connection it is followed on, the others through connections opened for
the dump alone, closed after it (in-process, no network)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.remote.commands import CommandResult
from ddptui.remote.transport import Transport
from ddptui.run.backends import RunBackend, StartFailed
from ddptui.run.record import Attempt, NodeRecord, RunRecord
from ddptui.run.stopper import StopReport
from tests.run.hostile_answers import AnsweringHost

HOSTS = ("node0", "node1", "node2")


class Dumping(AnsweringHost):
    """Answers the node agent's ``dump`` for any host with its one rank's stack; keeps which
    hosts it was asked, and whether it was closed."""

    def __init__(self) -> None:
        super().__init__({})
        self.hosts: list[str] = []
        self.closed = False

    def answer(self, host: HostConfig, command: str) -> CommandResult:
        assert command == "dump", command
        self.hosts.append(host.name)
        rank = HOSTS.index(host.name)
        stack = f'Thread 1 (idle): "MainThread"\n    step (loop.py:{rank})\n'
        ranks = [{"rank": rank, "pid": 10 + rank, "via": "py-spy", "text": stack}]
        document = {"attempt": 1, "ranks": [r | {"error": "", "note": ""} for r in ranks]}
        return CommandResult(0, json.dumps(document | {"flight": []}), "")

    async def close(self) -> None:
        self.closed = True


class Backend(RunBackend):
    async def start(self, number: int, *, resume: bool, debug: bool) -> StartFailed | None:
        raise AssertionError("not started here")

    async def stop(self, *, kill: bool, graceful: bool) -> StopReport:
        raise AssertionError("not stopped here")

    async def terminate(self, skip: Collection[str] = ()) -> StopReport:
        raise AssertionError("not ended here")


def _backend(opened: list[tuple[list[str], Dumping]]) -> Backend:
    hosts = tuple(HostConfig(name, f"10.0.0.{i}") for i, name in enumerate(HOSTS))
    config = Config(Path("hosts.toml"), ClusterConfig(), hosts, JobConfig())
    nodes = [NodeRecord(name, f"10.0.0.{i}", i, 1, "/r", [], {}) for i, name in enumerate(HOSTS)]
    record = RunRecord(
        "20990101-000000-abcd", 0.0, "hosts.toml", "trainer", "gloo", "10.0.0.0", 3, [], nodes
    )
    record.attempts.append(Attempt(1, 0.0, 29500))

    async def open_transport(hosts: Sequence[HostConfig], job_id: str | None, *_: Any) -> Transport:
        transport = Dumping()
        opened.append(([host.name for host in hosts], transport))
        return transport

    return Backend(config, SimpleNamespace(record=record), open_transport)  # type: ignore[arg-type]


def test_a_followed_host_is_asked_where_it_is_followed_and_no_connection_is_made_for_it() -> None:
    opened: list[tuple[list[str], Dumping]] = []
    followed = Dumping()
    taken = asyncio.run(_backend(opened).take_stacks((), {"node1": followed}, own_connections=True))
    assert [stack.rank for stack in taken.stacks] == [0, 1, 2] and not taken.unanswered
    assert followed.hosts == ["node1"] and not followed.closed
    ((hosts, rest),) = opened
    assert hosts == ["node0", "node2"] and sorted(rest.hosts) == ["node0", "node2"]
    assert rest.closed


def test_within_a_job_the_others_are_asked_through_the_job_s_connections() -> None:
    opened: list[tuple[list[str], Dumping]] = []
    backend = _backend(opened)

    async def in_a_job() -> list[str]:
        await backend.connect()
        ((_, job),) = opened
        await backend.take_stacks(("node2",), {"node1": Dumping()})
        assert len(opened) == 1 and not job.closed
        await backend.disconnect()
        assert job.closed
        return job.hosts

    assert asyncio.run(in_a_job()) == ["node0"]
