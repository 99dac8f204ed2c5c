"""A run that lost a rank goes on with fewer (real torchrun, gloo, CPU): the same global batch,
every sample of the epoch exactly once in the one global order, and the loss where it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.launch import events, finish, kill_ranks, standalone, torchrun, wait_for
from trainer.checkpoint import CheckpointStore
from trainer.data import epoch_order
from trainer.dist import decode

pytestmark = pytest.mark.slow

# 200 steps of 3 ranks × 8: a kill soon after step 50 lands mid-epoch, a few seconds in all.
SAMPLES, STEPS = 4800, 200
ARGS = ["--width", "64", "--depth", "2", "--samples", str(SAMPLES), "--batch-size", "8",
        "--epochs", "1", "--lr", "1e-2", "--log-samples", "--checkpoint-every", "25"]  # fmt: skip


def _runs(run_dir: Path, rank: int) -> list[list[dict[str, Any]]]:
    """A rank's events, one list per launch: each launch appends to the same file."""
    runs: list[list[dict[str, Any]]] = []
    for event in events(run_dir, rank):
        if event["type"] == "start":
            runs.append([])
        runs[-1].append(event)
    return runs


def _steps(run: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {e["step"]: e for e in run if e["type"] == "step"}


def _mean_loss(per_rank: list[dict[int, dict[str, Any]]], steps: range) -> float:
    losses = [rank[s]["loss"] for rank in per_rank for s in steps]
    return sum(losses) / len(losses)


def test_a_run_resumed_on_fewer_ranks_sees_the_rest_of_the_epoch_at_the_same_global_batch(
    tmp_path: Path,
) -> None:
    proc = torchrun(tmp_path, ARGS, nproc=3)
    wait_for(lambda: (tmp_path / "checkpoints" / "ckpt-000000050.json").exists(), what="step 50")
    # The node lost whole: no rank is left to write a rescue, so the resume starts from the
    # periodic checkpoint, and every step before it is in the events of all three ranks.
    kill_ranks(tmp_path, 3)
    assert finish(proc) != 0

    assert finish(torchrun(tmp_path, [*ARGS, "--resume", "latest"], nproc=2)) == 0
    first = [_runs(tmp_path, r)[0] for r in range(3)]
    resumed = [_runs(tmp_path, r)[1] for r in range(2)]
    before, after = first[0][0], resumed[0][0]
    fault = after["start_step"]
    assert 50 <= fault < STEPS, "the kill came too late to land mid-epoch"
    assert after["start_epoch"] == 0 and after["exact_resume"] is False
    assert before["global_batch"] == after["global_batch"] == 24
    assert (before["batch_size"], before["grad_accum"]) == (8, 1)
    # 12 samples per rank do not fit in --batch-size 8: two micro-batches of 6.
    assert (after["batch_size"], after["grad_accum"]) == (6, 2)
    assert before["steps_per_epoch"] == after["steps_per_epoch"] == STEPS
    assert before["total_steps"] == after["total_steps"] == STEPS

    # Steps up to the checkpoint from the first launch, the rest from the resumed one.
    old, new = [_steps(run) for run in first], [_steps(run) for run in resumed]
    assert all(set(range(1, fault + 1)) <= rank.keys() for rank in old)
    assert all(rank.keys() == set(range(fault + 1, STEPS + 1)) for rank in new)
    order = [i for s in range(1, fault + 1) for rank in old for i in rank[s]["samples"]]
    order += [i for s in range(fault + 1, STEPS + 1) for rank in new for i in rank[s]["samples"]]
    assert sorted(order) == list(range(SAMPLES)), "a sample of the epoch missed or repeated"
    assert order == epoch_order(SAMPLES, seed=0, epoch=0).tolist()

    # The loss goes on from where it was, far below a fresh start's, and keeps falling.
    start = _mean_loss(old, range(1, 6))
    last_before = _mean_loss(old, range(fault - 4, fault + 1))
    first_after = _mean_loss(new, range(fault + 1, fault + 6))
    end = _mean_loss(new, range(STEPS - 49, STEPS + 1))
    assert last_before / 3 < first_after < 3 * last_before < start / 5, (
        start,
        last_before,
        first_after,
    )
    assert end < last_before, (last_before, end)
    assert {e["reason"] for e in (run[-1] for run in resumed)} == {"completed"}


def test_a_format_1_checkpoint_resumes_at_the_same_count_of_samples(tmp_path: Path) -> None:
    args = ["--width", "64", "--depth", "2", "--log-samples", "--checkpoint-every", "0"]
    assert standalone(tmp_path, [*args, "--max-steps", "6"]).returncode == 0
    # Rewritten as the trainer wrote it before the global order: this rank's micro-batches.
    path = tmp_path / "checkpoints" / "ckpt-000000006.pt"
    state = decode(path.read_bytes())
    assert state["progress"] == {"step": 6, "epoch": 0, "samples_in_epoch": 6 * 32}
    state["format"], state["progress"] = 1, {"step": 6, "epoch": 0, "batch_in_epoch": 6}
    CheckpointStore(path.parent, keep=1).save(state, step=6, epoch=0, world_size=1)

    result = standalone(tmp_path, [*args, "--max-steps", "8", "--resume", "latest"])
    assert result.returncode == 0, result.stderr
    start = events(tmp_path, 0, "start")[-1]
    assert start["start_step"] == 6 and start["exact_resume"] is False
    assert "may repeat or miss samples" in result.stderr
    resumed = [e["samples"] for e in events(tmp_path, 0, "step") if e["time"] > start["time"]]
    assert torch.cat([torch.tensor(s) for s in resumed]).tolist() == (
        epoch_order(8192, seed=0, epoch=0)[6 * 32 : 8 * 32].tolist()
    )
