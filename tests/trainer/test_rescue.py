"""Rescue checkpoints under real torchrun (gloo, CPU): the ranks that outlive a peer write the
last step they finished, and a resume from it repeats the uninterrupted run bit for bit."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.trainer.launch import (
    alive,
    events,
    finish,
    kill_ranks,
    losses,
    torchrun,
    wait_for,
    words,
)
from trainer.checkpoint import read_verified

pytestmark = pytest.mark.slow

# Dropout on: its draws must come out the same after a resume from one rank's state alone.
LM = [
    "--block-size", "32", "--width", "32", "--depth", "1", "--heads", "2", "--dropout", "0.1",
    "--batch-size", "8", "--max-steps", "150", "--checkpoint-every", "0",
]  # fmt: skip
RANKS = 3


def _pid(run_dir: Path, rank: int) -> int:
    pid = events(run_dir, rank, "start")[-1]["pid"]
    assert isinstance(pid, int)
    return pid


def _rescues(run_dir: Path, rank: int) -> list[dict[str, object]]:
    return [e for e in events(run_dir, rank, "checkpoint") if e.get("rescue")]


def test_a_peer_killed_mid_run_leaves_a_rescue_that_resumes_bit_for_bit(
    tmp_path: Path,
) -> None:
    args = [*LM, "--data", str(words(tmp_path / "words.txt", 4000))]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    assert finish(torchrun(straight, args, nproc=RANKS)) == 0

    proc = torchrun(interrupted, args, nproc=RANKS)
    wait_for(lambda: len(events(interrupted, 1, "step")) >= 40, what="step 40")
    os.kill(_pid(interrupted, 1), signal.SIGKILL)
    assert finish(proc) != 0

    # No periodic checkpoint: what the resume starts from is a survivor's rescue, written as
    # its collective failed, at the last step it finished; the other found it and wrote none.
    rescued = [e for rank in (0, 2) for e in _rescues(interrupted, rank)]
    assert len(rescued) == 1, rescued
    (rescue,) = rescued
    assert "in a collective" in str(rescue["rescue"])
    last = max(events(interrupted, rank, "step")[-1]["step"] for rank in (0, 2))
    assert 40 <= rescue["step"] == last < 150
    path = Path(str(rescue["path"]))
    assert read_verified(path.with_suffix(".json"))[1].step == last

    assert finish(torchrun(interrupted, [*args, "--resume", "latest"], nproc=RANKS)) == 0
    start = events(interrupted, 0, "start")[-1]
    assert start["resumed_from"] == str(path) and start["exact_resume"] is True
    assert start["start_step"] == last
    for rank in range(RANKS):
        expected = losses(straight, rank)
        assert len(expected) == 150
        resumed = {s: loss for s, loss in losses(interrupted, rank).items() if s > last}
        assert resumed == {s: loss for s, loss in expected.items() if s > last}  # bit for bit


def test_ranks_blocked_by_a_stopped_peer_rescue_on_request_and_end(tmp_path: Path) -> None:
    mlp = ["--width", "64", "--depth", "2", "--checkpoint-every", "0"]
    proc = torchrun(tmp_path, [*mlp, "--max-steps", "100000"], nproc=RANKS)
    try:
        wait_for(lambda: len(events(tmp_path, 1, "step")) >= 20, what="step 20")
        stopped = _pid(tmp_path, 1)
        os.kill(stopped, signal.SIGSTOP)
        # Blocked for good: the peers' collectives wait on the stopped rank.
        time.sleep(1.0)
        steps = [len(events(tmp_path, rank, "step")) for rank in (0, 2)]
        time.sleep(1.0)
        assert [len(events(tmp_path, rank, "step")) for rank in (0, 2)] == steps
        assert not (tmp_path / "checkpoints").exists()

        (tmp_path / "control" / "rescue").touch()
        survivors = [_pid(tmp_path, rank) for rank in (0, 2)]
        wait_for(lambda: not any(alive(pid) for pid in survivors), what="the survivors' end")
        rescued = [e for rank in (0, 2) for e in _rescues(tmp_path, rank)]
        assert rescued and all("asked by ddptui" in str(e["rescue"]) for e in rescued)
        # Two ranks of a node may stand a step apart (one got the all-reduce's last piece);
        # either is a whole step, and the newer is kept as well.
        finished = {events(tmp_path, rank, "step")[-1]["step"] for rank in (0, 2)}
        assert {e["step"] for e in rescued} <= finished
        assert max(finished) in {e["step"] for e in rescued}
    finally:
        kill_ranks(tmp_path, RANKS)
        proc.wait()

    # The request stays in place; the next attempt's ranks take it for an earlier one's.
    end = max(finished) + 10
    resumed = torchrun(tmp_path, [*mlp, "--max-steps", str(end), "--resume", "latest"], nproc=RANKS)
    assert finish(resumed) == 0
    assert events(tmp_path, 0, "start")[-1]["start_step"] == max(finished)
    assert events(tmp_path, 0, "done")[-1] == {**events(tmp_path, 0, "done")[-1], "step": end}
