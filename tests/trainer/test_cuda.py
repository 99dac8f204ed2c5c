"""The trainer on GPUs under real torchrun (nccl): what only a CUDA device can exercise.

Deferred step events (the loss reaches pinned host memory behind a CUDA event, no per-step
sync), the data set kept on the device, CUDA memory fields, and exact resume with both. Skipped
where no CUDA device is visible (CI); run on a GPU host by ``benchmarks/gpu_host.sh``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer.launch import events, finish, losses, torchrun, wait_for, words

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

GPU = ["--backend", "nccl", "--precision", "bf16", "--checkpoint-every", "0"]


def _gpus() -> int:
    return torch.cuda.device_count()


def test_every_step_event_arrives_once_in_order_with_cuda_memory_and_the_loss_falls(
    tmp_path: Path,
) -> None:
    steps = 400
    args = [*GPU, "--width", "256", "--depth", "3", "--samples", "65536", "--batch-size", "128",
            "--lr", "1e-2", "--max-steps", str(steps)]  # fmt: skip
    assert finish(torchrun(tmp_path, args, nproc=_gpus())) == 0

    for rank in range(_gpus()):
        start = events(tmp_path, rank, "start")[0]
        assert start["device"] == f"cuda:{rank}" and start["backend"] == "nccl"
        assert start["versions"]["cuda"] and start["versions"]["nccl"]
        stepped = events(tmp_path, rank, "step")
        assert [e["step"] for e in stepped] == list(range(1, steps + 1))
        times = [e["time"] for e in stepped]
        assert times == sorted(times)
        assert all(e["cuda_allocated_mib"] > 0 and e["cuda_peak_mib"] > 0 for e in stepped)
        assert all(isinstance(e["loss"], float) for e in stepped)
        curve = [e["loss"] for e in stepped]
        assert sum(curve[:10]) / 10 > 10 * sum(curve[-10:]) / 10, curve[::40]
        # Events emitted after the last step are written after it, not before its loss lands.
        kinds = [e["type"] for e in events(tmp_path, rank)]
        last_step = max(i for i, kind in enumerate(kinds) if kind == "step")
        # Every rank marks the final save's phase (its peers wait on rank 0's save).
        saved = ["checkpoint"] if rank == 0 else []
        assert kinds[last_step + 1 :] == ["phase", *saved, "phase", "done"]


@pytest.mark.parametrize("task", ["mlp", "char_lm"])
def test_a_stop_then_resume_repeats_the_uninterrupted_losses_bit_for_bit(
    tmp_path: Path, task: str
) -> None:
    # Enough steps that a stop seen at step 20 lands well before the end on a fast GPU.
    steps = 2000
    model = (
        ["--data", str(words(tmp_path / "words.txt", 20000)), "--block-size", "64",
         "--width", "128", "--depth", "2", "--heads", "4", "--batch-size", "32"]
        if task == "char_lm"
        else ["--width", "512", "--depth", "3", "--samples", "32768", "--batch-size", "256"]
    )  # fmt: skip
    args = [*GPU, *model, "--max-steps", str(steps)]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    assert finish(torchrun(straight, args, nproc=_gpus())) == 0

    proc = torchrun(interrupted, args, nproc=_gpus())
    wait_for(lambda: len(events(interrupted, 0, "step")) >= 20, what="step 20")
    (interrupted / "control" / "stop").touch()
    assert finish(proc) == 0
    stopped = events(interrupted, 0, "done")[0]
    assert stopped["reason"] == "stopped" and 20 <= stopped["step"] < steps

    assert finish(torchrun(interrupted, [*args, "--resume", "latest"], nproc=_gpus())) == 0
    start = events(interrupted, 0, "start")[-1]
    assert start["exact_resume"] is True and start["start_step"] == stopped["step"]
    for rank in range(_gpus()):
        expected = losses(straight, rank)
        assert len(expected) == steps
        assert losses(interrupted, rank) == expected  # == on floats: bit for bit
