"""The node agent's ``run`` (a Slurm step's node, started as ``start`` starts one, in the
foreground, ending with its command) and its ``wait`` for a run's processes to end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ddptui.onhost import processes
from ddptui.remote.programs import agent_program
from tests.onhost.agent import agent

STEP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _run(tmp_path: Path, *command: str) -> subprocess.Popen[str]:
    (tmp_path / "code").mkdir(exist_ok=True)
    argv = [sys.executable, "-", "run", str(tmp_path / "run"), str(tmp_path / "code"), "2"]
    process = subprocess.Popen(
        [*argv, *command],
        # As a Slurm step's batch script exports the run's environment before the agent runs.
        env={**os.environ, "FROM_HEAD": "yes"},
        stdin=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdin is not None
    process.stdin.write(agent_program())
    process.stdin.close()
    return process


def test_run_waits_for_its_command_and_ends_with_its_status(tmp_path: Path) -> None:
    told = 'echo "$FROM_HEAD $DDPTUI_ATTEMPT $(pwd)"; exit 3'
    process = _run(tmp_path, "sh", "-c", told)
    assert process.wait(timeout=30) == 3
    node = tmp_path / "run" / "node"
    assert (node / "attempt-2.exit").read_text() == "3\n"
    assert (node / "attempt-2.out").read_text() == f"yes 2 {tmp_path / 'code'}\n"
    assert (node / "attempt-2.pgid").read_text().strip().isdigit()


def test_a_step_s_sigterm_ends_the_command_and_run_still_records_how(tmp_path: Path) -> None:
    process = _run(tmp_path, "sleep", "60")
    exit_file = tmp_path / "run" / "node" / "attempt-2.exit"
    pgid_file = exit_file.with_suffix(".pgid")
    deadline = time.monotonic() + 30
    while not pgid_file.exists():
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    # As scancel --signal=TERM does: every process of the step at once.
    os.killpg(process.pid, signal.SIGTERM)
    assert process.wait(timeout=30) == 128 + signal.SIGTERM
    assert exit_file.read_text() == f"{128 + signal.SIGTERM}\n"


def test_a_step_s_sigterm_before_the_command_exists_still_ends_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # scancel as the step starts: the signal reaches the node before its command is forked.
    started = subprocess.Popen

    def signalled_first(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        os.kill(os.getpid(), signal.SIGTERM)
        return started(*args, **kwargs)

    monkeypatch.setattr(processes.subprocess, "Popen", signalled_first)
    before = {number: signal.getsignal(number) for number in STEP_SIGNALS}
    (tmp_path / "code").mkdir()
    try:
        status = processes.run(tmp_path / "run", tmp_path / "code", "1", ["sleep", "20"])
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
    assert status == 128 + signal.SIGTERM
    assert (tmp_path / "run" / "node" / "attempt-1.exit").read_text() == f"{status}\n"


def test_a_command_that_cannot_start_ends_the_step_s_node_as_a_shell_would(tmp_path: Path) -> None:
    process = _run(tmp_path, str(tmp_path / "no-such-program"))
    assert process.wait(timeout=30) == 1
    node = tmp_path / "run" / "node"
    assert (node / "attempt-2.exit").read_text() == "127\n"
    assert "no-such-program" in (node / "attempt-2.out").read_text()


@pytest.mark.parametrize("rank_lives", [False, True], ids=["launcher-only", "rank-lives"])
def test_wait_with_linger_returns_once_only_launchers_are_left(
    tmp_path: Path, rank_lives: bool
) -> None:
    # torchrun's part: a launcher (no RANK) that outlives its rank, as in its exit barrier.
    rank = "sleep 600" if rank_lives else "true"
    launcher = f"RANK=0 {rank} & sleep 600"
    run_dir, code = tmp_path / "run", tmp_path / "code"
    code.mkdir()
    started = agent("start", str(run_dir), str(code), "1", "sh", "-c", launcher)
    pgid = started["pgid"]
    assert isinstance(pgid, int)
    try:
        began = time.monotonic()
        answer = agent("wait", str(run_dir), "4" if rank_lives else "60", "1")
        waited = time.monotonic() - began
        attempt = answer["attempts"]["1"]  # type: ignore[index]
        assert attempt["alive"] is True
        if rank_lives:
            # A rank still there: the wait lasts its whole time.
            assert attempt["ranks"] == 1 and waited >= 4
        else:
            assert attempt["ranks"] == 0 and waited < 30
    finally:
        os.killpg(pgid, signal.SIGKILL)


def test_sigterm_ends_a_stopped_rank_at_once_and_control_makes_its_request_anew(
    tmp_path: Path,
) -> None:
    run_dir, code = tmp_path / "run", tmp_path / "code"
    code.mkdir()
    started = agent("start", str(run_dir), str(code), "1", "sh", "-c", "RANK=0 exec sleep 600")
    pgid = started["pgid"]
    assert isinstance(pgid, int)
    try:
        rank = next(pid for pid, name, *_ in processes.run_processes(run_dir) if name == "sleep")
        os.kill(rank, signal.SIGSTOP)
        # A stopped process keeps SIGTERM pending until it runs again: the agent kills it.
        agent("signal", str(run_dir), "TERM")
        answer = agent("wait", str(run_dir), "20")
        assert answer["attempts"]["1"]["alive"] is False  # type: ignore[index]
    finally:
        os.killpg(pgid, signal.SIGKILL)

    agent("control", str(run_dir), "rescue")
    request = run_dir / "control" / "rescue"
    first = request.stat()
    agent("control", str(run_dir), "rescue")
    # A trainer tells a request made for it from one left before it started by the file's
    # identity and time (an inode may be reused at once): each request is a file of its own.
    again = request.stat()
    assert (again.st_ino, again.st_mtime_ns) != (first.st_ino, first.st_mtime_ns)
