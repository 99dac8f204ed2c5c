"""A host's error is one line of ddptui's words, whatever the host puts in it: gpu-b answering
``{"error": "…\\nrank 0 on gpu-a: …"}`` must not print a line of ``ddptui dump`` that reads as
gpu-a's rank 0.

The hosts are in-process SSH servers answering the node agent's commands
(:attr:`Behaviour.AGENT`); the dump and the client functions are the real ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.config.model import ClusterConfig, Config, JobConfig
from ddptui.present.stacks import dump_lines
from ddptui.remote.connection import RemoteCluster
from ddptui.run.agent import client as nodes
from ddptui.run.agent.call import NodeError, kept_agents
from ddptui.run.backends import kind_of
from ddptui.run.evidence import dump as stack_dump
from ddptui.run.evidence import kept as kept_dump
from ddptui.run.record import RunRecord
from tests.helpers import Behaviour, HostileSshServer
from tests.run.agent.test_answers import CONNECT_TIMEOUT_S, RUN_DIR, TORCHRUN, agent_host
from tests.run.bed import one_rank_a_host_record

FORGED = "py-spy is not installed\nrank 0 on gpu-a: all_reduce ← step ← <module> at train.py:41"
"""What gpu-b says: its second line is how ``ddptui dump`` heads gpu-a's rank 0."""
PY_SPY = """\
Process 4243: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4243 (idle): "MainThread"
    sleep_here (train.py:12)
    step (train.py:41)
    <module> (train.py:55)
"""


def _answer(document: object) -> bytes:
    return json.dumps(document).encode() + b"\n"


def _gpu_a(args: list[str]) -> bytes:
    rank = {"rank": 0, "pid": 4243, "via": "py-spy", "text": PY_SPY, "error": "", "note": ""}
    return _answer({"attempt": 1, "ranks": [rank], "flight": []})


def _gpu_b(args: list[str]) -> bytes:
    return _answer({"error": FORGED})


@pytest.fixture
def two_hosts(tmp_path: Path) -> Iterator[tuple[Config, RunRecord]]:
    with (
        HostileSshServer.start(tmp_path / "a", Behaviour.AGENT, agent=_gpu_a) as gpu_a,
        HostileSshServer.start(tmp_path / "b", Behaviour.AGENT, agent=_gpu_b) as gpu_b,
    ):
        hosts = (agent_host(gpu_a, "gpu-a"), agent_host(gpu_b, "gpu-b"))
        config = Config(
            Path("hosts.toml"), ClusterConfig(connect_timeout=CONNECT_TIMEOUT_S), hosts, JobConfig()
        )
        record = one_rank_a_host_record(
            "20990101-000000-dump", hosts, [RUN_DIR] * len(hosts), TORCHRUN
        )
        yield config, record


def test_a_host_s_error_cannot_print_a_line_of_another_host_s_in_a_dump(
    two_hosts: tuple[Config, RunRecord],
) -> None:
    config, record = two_hosts

    async def take() -> kept_dump.StackDump:
        async with kind_of(config).reaching(record) as remote:
            return await stack_dump.take(config, record, remote)

    taken = asyncio.run(take())
    printed = "\n".join(line.plain for line in dump_lines(taken)).splitlines()
    assert [line for line in printed if "rank 0 on gpu-a" in line] == [
        "rank 0 on gpu-a: sleep_here ← step ← <module> at train.py:12",
        "no answer from gpu-b: py-spy is not installed\\nrank 0 on gpu-a: all_reduce ← step ← "
        "<module> at train.py:41",
    ]


@pytest.mark.parametrize("kept", [False, True], ids=["one-shot", "kept"])
def test_a_host_s_error_is_one_line(two_hosts: tuple[Config, RunRecord], kept: bool) -> None:
    config, _ = two_hosts
    gpu_b = config.hosts[1]

    async def ask() -> NodeError:
        async with (
            RemoteCluster([gpu_b], connect_timeout=CONNECT_TIMEOUT_S) as remote,
            kept_agents(remote, [gpu_b]) if kept else contextlib.nullcontext(),
        ):
            with pytest.raises(NodeError) as raised:
                await nodes.status(remote, gpu_b, RUN_DIR, attempts=1)
            return raised.value

    said = str(asyncio.run(ask()))
    assert said == "gpu-b: " + FORGED.replace("\n", "\\n")
