"""The trainer under real torchrun (gloo, CPU): learning, sharding, stops, exact resume, damage."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.trainer.launch import (
    events,
    finish,
    kill_ranks,
    losses,
    standalone,
    torchrun,
    wait_for,
    words,
)
from trainer.checkpoint import read_verified
from trainer.data import epoch_order

pytestmark = pytest.mark.slow

SMALL_MLP = ["--width", "64", "--depth", "2", "--checkpoint-every", "0"]


def _done(run_dir: Path, ranks: int) -> list[dict[str, object]]:
    found = [events(run_dir, r, "done") for r in range(ranks)]
    assert all(len(d) == 1 for d in found), found
    return [d[0] for d in found]


def test_two_ranks_learn_on_disjoint_slices_of_one_reshuffled_order(tmp_path: Path) -> None:
    args = [*SMALL_MLP, "--samples", "1024", "--epochs", "3", "--lr", "1e-2", "--log-samples"]
    assert finish(torchrun(tmp_path, args)) == 0

    start = events(tmp_path, 0, "start")[0]
    assert start["global_batch"] == 64 and start["steps_per_epoch"] == 16
    assert (start["batch_size"], start["grad_accum"]) == (32, 1)
    # Its own launch stages, in order, and its own work per step: a part of the step.
    launch = start["launch"]
    assert launch["process"] < launch["imported"] < launch["rendezvous"] <= start["time"]
    for step in events(tmp_path, 0, "step"):
        assert 0 < step["compute_s"] < step["step_time_s"], step
    for rank in (0, 1):
        curve = list(losses(tmp_path, rank).values())
        assert len(curve) == 48
        assert sum(curve[:3]) / 3 > 10 * sum(curve[-3:]) / 3, curve
    seen = {
        (r, e["epoch"]): [i for e2 in events(tmp_path, r, "step") if e2["epoch"] == e["epoch"]
                          for i in e2["samples"]]
        for r in (0, 1) for e in events(tmp_path, r, "epoch_end")
    }  # fmt: skip
    for epoch in range(3):
        mine, theirs = seen[0, epoch], seen[1, epoch]
        assert len(mine) == len(theirs) == 512
        assert set(mine).isdisjoint(theirs) and len(set(mine) | set(theirs)) == 1024
        # Each step: rank 0's half of the next 64 of the epoch's order, then rank 1's.
        order = [i for k in range(0, 512, 32) for i in mine[k : k + 32] + theirs[k : k + 32]]
        assert order == epoch_order(1024, seed=0, epoch=epoch).tolist()
    assert len({tuple(seen[0, epoch]) for epoch in range(3)}) == 3
    assert {d["reason"] for d in _done(tmp_path, 2)} == {"completed"}


LM = [
    "--block-size", "32", "--width", "32", "--depth", "1", "--heads", "2", "--dropout", "0.1",
    "--batch-size", "8", "--grad-accum", "2", "--max-steps", "120", "--checkpoint-every", "0",
]  # fmt: skip


@pytest.fixture(scope="module")
def text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return words(tmp_path_factory.mktemp("data") / "words.txt", 4000)


def test_control_file_stop_then_resume_matches_an_uninterrupted_run_bit_for_bit(
    tmp_path: Path, text: Path
) -> None:
    args = [*LM, "--data", str(text)]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    assert finish(torchrun(straight, args)) == 0

    proc = torchrun(interrupted, args)
    wait_for(lambda: len(events(interrupted, 0, "step")) >= 8, what="step 8")
    # The trainer made control/ itself, so that a plain `touch` can stop it.
    (interrupted / "control" / "stop").touch()
    assert finish(proc) == 0
    stopped = _done(interrupted, 2)
    step = stopped[0]["step"]
    assert isinstance(step, int) and 8 <= step < 120, "the run ended before the stop landed"
    assert [d["reason"] for d in stopped] == ["stopped", "stopped"]
    assert [d["step"] for d in stopped] == [step, step]
    assert events(interrupted, 0, "stop_requested")[0]["source"] == "control/stop"
    assert events(interrupted, 1, "stop_requested")[0]["source"] == "peer"
    checkpoint = interrupted / "checkpoints" / f"ckpt-{step:09d}.pt"
    assert read_verified(checkpoint.with_suffix(".json"))[1].step == step
    assert not (interrupted / "control" / "stop").exists()

    assert finish(torchrun(interrupted, [*args, "--resume", "latest"])) == 0
    start = events(interrupted, 0, "start")[-1]
    assert start["resumed_from"] == str(checkpoint) and start["exact_resume"] is True
    assert start["start_step"] == step
    for rank in (0, 1):
        expected = losses(straight, rank)
        assert len(expected) == 120
        assert losses(interrupted, rank) == expected  # == on floats: bit for bit
        assert (
            events(interrupted, rank, "step")[-1]["lr"] == events(straight, rank, "step")[-1]["lr"]
        )


def test_sigterm_to_torchrun_stops_every_rank_at_one_step_with_a_checkpoint(
    tmp_path: Path,
) -> None:
    proc = torchrun(tmp_path, [*SMALL_MLP, "--epochs", "1000"])
    wait_for(lambda: events(tmp_path, 1, "step") and events(tmp_path, 0, "step"), what="steps")
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    finish(proc)  # torchrun itself re-raises the signal; the workers' outcome is what counts
    assert time.monotonic() - signalled < 25, "workers outlived torchrun's 30 s window"
    done = _done(tmp_path, 2)
    assert [d["reason"] for d in done] == ["stopped", "stopped"]
    assert done[0]["step"] == done[1]["step"]
    assert {events(tmp_path, r, "stop_requested")[0]["source"] for r in (0, 1)} == {"SIGTERM"}
    step = done[0]["step"]
    assert read_verified(tmp_path / "checkpoints" / f"ckpt-{step:09d}.json")[1].step == step


def test_sigkill_during_a_checkpoint_write_leaves_the_previous_one_loadable(
    tmp_path: Path,
) -> None:
    # A checkpoint of ~40 MB every step: rank 0 spends most of its time writing one.
    model = ["--width", "1024", "--depth", "3", "--samples", "4096"]
    proc = torchrun(tmp_path, [*model, "--checkpoint-every", "1", "--keep", "2"])
    ckpts = tmp_path / "checkpoints"
    wait_for(lambda: list(ckpts.glob("ckpt-*.json")), what="a first checkpoint")
    partial = wait_for(lambda: list(ckpts.glob(".ckpt-*.pt.tmp")), what="a write in progress")
    # Every rank at once: one left alive would write a rescue (and tidy the write away).
    kill_ranks(tmp_path, 2)
    assert finish(proc) != 0
    assert partial[0].exists(), "the kill came too late to interrupt the write"

    newest = max(ckpts.glob("ckpt-*.json"))
    _, manifest = read_verified(newest)
    # Resume on one process: another world size, so not bit for bit; the global batch of 64
    # stays, in two micro-batches of 32.
    result = standalone(
        tmp_path, [*model, "--resume", "latest", "--max-steps", str(manifest.step + 2)]
    )
    assert result.returncode == 0, result.stderr
    start = events(tmp_path, 0, "start")[-1]
    assert start["resumed_from"] == str(newest.with_suffix(".pt"))
    assert start["exact_resume"] is False and start["world_size"] == 1
    assert (start["global_batch"], start["batch_size"], start["grad_accum"]) == (64, 32, 2)
    done = events(tmp_path, 0, "done")[-1]
    assert (done["reason"], done["step"]) == ("completed", manifest.step + 2)
    assert "world size" in result.stderr and "kept exactly" in result.stderr


def test_standalone_resume_skips_a_corrupted_newest_checkpoint(tmp_path: Path) -> None:
    args = [*SMALL_MLP, "--checkpoint-every", "2", "--keep", "3"]
    assert standalone(tmp_path, [*args, "--max-steps", "6"]).returncode == 0
    first = losses(tmp_path, 0)
    newest = tmp_path / "checkpoints" / "ckpt-000000006.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x01
    newest.write_bytes(bytes(data))

    result = standalone(tmp_path, [*args, "--max-steps", "6", "--resume", "latest"])
    assert result.returncode == 0, result.stderr
    assert "skipped checkpoint" in result.stderr and "checksum" in result.stderr
    start = events(tmp_path, 0, "start")[-1]
    assert start["resumed_from"] == str(tmp_path / "checkpoints" / "ckpt-000000004.pt")
    assert start["skipped_checkpoints"][0]["path"] == str(newest)
    assert start["exact_resume"] is True
    resumed = [e for e in events(tmp_path, 0, "step") if e["time"] >= start["time"]]
    assert [(e["step"], e["loss"]) for e in resumed] == [(s, first[s]) for s in (5, 6)]


def test_min_step_s_paces_the_steps_and_leaves_the_losses_as_they_were(tmp_path: Path) -> None:
    args = [*SMALL_MLP, "--max-steps", "6", "--lr", "1e-2"]
    assert standalone(tmp_path / "free", args).returncode == 0
    assert standalone(tmp_path / "paced", [*args, "--min-step-s", "0.5"]).returncode == 0
    free, paced = (events(tmp_path / run, 0, "step") for run in ("free", "paced"))
    # Each step starts at least 0.5 s after the one before. An event is written as its step's
    # work ends, so the five after the first span at least 5 × 0.5 s, less whatever more work
    # the first step did than the last (at most the first's whole time).
    spanned = paced[-1]["time"] - paced[0]["time"]
    assert spanned >= 5 * 0.5 - paced[0]["step_time_s"], paced
    # Not slow of themselves (a loaded machine may stretch one step, not half the pace's time).
    assert sum(e["step_time_s"] for e in free[1:]) < 5 * 0.5 / 2, free
    assert [e["loss"] for e in paced] == [e["loss"] for e in free]


def test_fsdp_trains_and_resumes_at_another_world_size(tmp_path: Path) -> None:
    args = [*SMALL_MLP, "--max-steps", "12", "--lr", "1e-2"]
    assert finish(torchrun(tmp_path, [*args, "--fsdp"])) == 0
    assert events(tmp_path, 0, "start")[0]["fsdp"] is True
    curve = list(losses(tmp_path, 1).values())
    assert curve[-1] < curve[0] / 2, curve
    result = standalone(tmp_path, [*args, "--max-steps", "14", "--resume", "latest", "--fsdp"])
    assert result.returncode == 0, result.stderr
    start = events(tmp_path, 0, "start")[-1]
    assert (start["global_batch"], start["grad_accum"], start["exact_resume"]) == (64, 2, False)
    resumed = events(tmp_path, 0, "step")[-1]
    assert resumed["step"] == 14 and resumed["loss"] < curve[0] / 2


def test_an_error_is_an_event_a_torchrun_error_file_and_a_nonzero_exit(tmp_path: Path) -> None:
    error_file = tmp_path / "error.json"
    result = standalone(
        tmp_path, ["--data", str(tmp_path / "missing.txt")],
        env={"TORCHELASTIC_ERROR_FILE": str(error_file)},
    )  # fmt: skip
    assert result.returncode != 0
    error = events(tmp_path, 0, "error")[0]
    assert "missing.txt" in error["message"] and "Traceback" in error["traceback"]
    assert "missing.txt" in error_file.read_text()
