"""The srun transport's own side, where it runs commands on the login node (a Slurm job that has
ended): real processes, their output capped and their time bounded as over SSH; and a follower
of a Slurm run's node reading the shared run directory through it. Its srun side runs on the
Slurm bed (tests/run/test_slurm_bed.py)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig, SlurmConfig
from ddptui.layout import HostFiles
from ddptui.remote.commands import CommandResult
from ddptui.remote.files import UnreadableFile
from ddptui.remote.srun import SrunCluster
from ddptui.run.backends import kind_of
from ddptui.run.backends.slurm.commands import job_ended
from ddptui.run.following.files import HostFollower
from ddptui.run.following.updates import FileLine, Heartbeat

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
    flood = transport.python(NODE, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)")
    capped = asyncio.run(transport.run(NODE, flood, timeout=30, max_stdout=100_000))
    assert capped.exit_status is None and capped.overflow is not None
    assert len(capped.stdout) == 100_000
    slow = transport.python(NODE, "-c", "import time; print('begun', flush=True); time.sleep(60)")
    timed_out = asyncio.run(transport.run(NODE, slow, timeout=1))
    assert timed_out.timed_out and timed_out.stdout == "begun\n"


def test_a_stream_that_ends_says_why() -> None:
    async def stream() -> tuple[list[bytes], str]:
        here = SrunCluster(None)
        argv = here.python(NODE, "-c", "import sys; print('one'); sys.exit('no allocation here')")
        opened = await here.open_stream(NODE, argv, input="", max_line=100)
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
            config,
            config.host("node1"),
            str(tmp_path),
            HostFiles(range(2, 4), 1),
            open_transport=kind_of(config).transport,
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


RUNNING_JOB = Path(__file__).parents[1] / "fixtures" / "slurm" / "squeue-job-running.txt"


def stand_in_slurm(bin_dir: Path, *, job_state: str, task_says: str) -> None:
    """``srun`` as a compromised node's step answers (its task writes what srun prints on
    stderr), and ``squeue`` as the controller has the job."""
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(f"#!/bin/sh\necho {task_says!r} >&2\nexit 1\n")
    shown = RUNNING_JOB.read_text().replace("|RUNNING|", f"|{job_state}|")
    squeue = bin_dir / "squeue"
    squeue.write_text(f"#!/bin/sh\ncat <<'JOB'\n{shown}JOB\n")
    for script in (srun, squeue):
        script.chmod(0o755)


def test_a_node_that_says_the_job_is_gone_runs_nothing_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The node writes Python where its flight recorder's dump should be, then fails its step
    # with srun's words for an ended job: the landed code ran `python <that file>` here.
    marker = tmp_path / "ran-here"
    planted = tmp_path / "node" / "flight_0"
    planted.parent.mkdir()
    planted.write_text(f"open({str(marker)!r}, 'w').close()\n")
    stand_in_slurm(tmp_path / "bin", job_state="RUNNING", task_says="srun: error: Invalid job id 3")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    transport = SrunCluster("3", job_ended=job_ended)

    async def read() -> tuple[CommandResult, CommandResult, str]:
        base64 = await transport.run(NODE, ["base64", str(planted)], timeout=30)
        agent = await transport.run(NODE, transport.python(NODE, "-c", "print(1)"), timeout=30)
        with pytest.raises(UnreadableFile) as refused:
            await transport.read_file(NODE, str(planted), max_bytes=1 << 20, timeout=30)
        return base64, agent, str(refused.value)

    base64, agent, refused = asyncio.run(read())
    assert not marker.exists()
    assert (base64.exit_status, agent.exit_status, refused) == (1, 1, "it cannot be read")
    # Slurm says the job runs: srun's failure is the node's, and nothing moved here.
    assert transport.job_id == "3"


def test_a_job_slurm_says_has_ended_reads_the_shared_workdir_here_never_through_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = tmp_path / "node" / "flight_0"
    dump.parent.mkdir()
    dump.write_bytes(b"\x80\x02}.")
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY")
    (tmp_path / "node" / "flight_1").symlink_to(secret)
    stand_in_slurm(tmp_path / "bin", job_state="COMPLETED", task_says="anything at all")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    transport = SrunCluster("3", job_ended=job_ended)

    async def read() -> tuple[bytes, str, CommandResult]:
        data = await transport.read_file(NODE, str(dump), max_bytes=100, timeout=30)
        with pytest.raises(UnreadableFile) as linked:
            await transport.read_file(
                NODE, str(dump.parent / "flight_1"), max_bytes=100, timeout=30
            )
        # Not the node's Python: no agent to run here, and the command is not run here.
        other = await transport.run(NODE, ["base64", str(dump)], timeout=30)
        return data, str(linked.value), other

    data, linked, other = asyncio.run(read())
    assert data == b"\x80\x02}."
    assert "symbolic link" in linked
    assert transport.local
    assert other.exit_status is None and other.reach is not None
    assert "only the node agent runs on this machine" in other.reach.detail


def test_a_file_over_the_cap_is_refused_not_cut(tmp_path: Path) -> None:
    big = tmp_path / "flight_0"
    big.write_bytes(b"x" * 101)
    with pytest.raises(UnreadableFile, match="larger than ddptui reads"):
        asyncio.run(SrunCluster(None).read_file(NODE, str(big), max_bytes=100, timeout=30))
