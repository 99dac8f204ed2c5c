"""The srun transport's own side, where it runs commands on the login node (a Slurm job that has
ended): real processes, their output capped and their time bounded as over SSH; and a follower
of a Slurm run's node reading the shared run directory through it. Its srun side runs on the
Slurm bed (tests/run/test_slurm_bed.py)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig, SlurmConfig
from ddptui.remote.srun import SrunCluster
from ddptui.run.follow import FileLine, Heartbeat, HostFollower
from ddptui.run.layout import HostFiles

NODE = HostConfig("node1", "node1", python="/the/nodes/own/python")


def test_once_the_job_has_ended_commands_run_here_with_this_machine_s_python() -> None:
    transport = SrunCluster(None)
    argv = transport.python(NODE, "-c", "import sys; print(sys.stdin.read()[::-1])")
    assert argv[0] == sys.executable
    result = asyncio.run(transport.run(NODE, argv, input="olleh", timeout=30))
    assert (result.exit_status, result.stdout) == (0, "hello\n")


def test_a_running_job_s_commands_are_srun_steps_on_the_node() -> None:
    transport = SrunCluster("42")
    argv = transport.python(NODE, "-", "status", "/run")
    assert argv == ["/the/nodes/own/python", "-", "status", "/run"]
    assert transport._argv(NODE, argv) == [
        "srun",
        "--jobid=42",
        "--overlap",
        "--nodelist=node1",
        "--nodes=1",
        "--ntasks=1",
        "--quiet",
        *argv,
    ]


def test_output_is_capped_and_a_command_that_runs_too_long_is_ended() -> None:
    transport = SrunCluster(None)
    flood = [sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"]
    capped = asyncio.run(transport.run(NODE, flood, timeout=30, max_stdout=100_000))
    assert capped.exit_status is None and capped.overflow is not None
    assert len(capped.stdout) == 100_000
    slow = [sys.executable, "-c", "import time; print('begun', flush=True); time.sleep(60)"]
    timed_out = asyncio.run(transport.run(NODE, slow, timeout=1))
    assert timed_out.timed_out and timed_out.stdout == "begun\n"


def test_a_stream_that_ends_says_why() -> None:
    async def stream() -> tuple[list[bytes], str]:
        argv = [sys.executable, "-c", "import sys; print('one'); sys.exit('no allocation here')"]
        opened = await SrunCluster(None).open_stream(NODE, argv, input="", max_line=100)
        lines = [line async for line in opened.lines()]
        await opened.close()
        return lines, opened.why_ended

    assert asyncio.run(stream()) == ([b"one"], "no allocation here")


def test_a_slurm_run_s_node_is_followed_from_the_shared_run_directory(tmp_path: Path) -> None:
    events = tmp_path / "events" / "rank2.jsonl"
    events.parent.mkdir()
    events.write_text(json.dumps({"type": "step", "step": 1}) + "\n")
    config = Config(
        tmp_path / "slurm.toml",
        ClusterConfig(),
        (),
        JobConfig(),
        slurm=SlurmConfig(nodes=2),
        node=HostConfig("slurm-node", "slurm-node"),
    )

    async def follow() -> list[object]:
        follower = HostFollower(
            config, config.host("node1"), str(tmp_path), HostFiles(range(2, 4), 1)
        )
        seen: list[object] = []
        async for update in follower.updates():
            seen.append(update)
            if isinstance(update, Heartbeat):
                break
        await follower.close()
        return seen

    seen = asyncio.run(follow())
    assert [(u.host, u.path, u.text) for u in seen if isinstance(u, FileLine)] == [
        ("node1", "events/rank2.jsonl", '{"type": "step", "step": 1}')
    ]
