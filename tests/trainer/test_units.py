"""In-process checks of the trainer's pure parts: sharding, schedule, checkpoint files, events."""

from __future__ import annotations

import ast
import itertools
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from ddptui.run.evidence.flight import read_dump
from tests.trainer.launch import SOURCE
from trainer.checkpoint import CheckpointStore, read_verified
from trainer.cli import DEFAULT_EPOCHS, parse_args
from trainer.data import CharText, Shards, SyntheticRegression, epoch_order
from trainer.dist import Placement, TrainerError
from trainer.events import BufferPool, DeviceScalars, EventLog, _ResidentMemory, finite
from trainer.loop import _autocast, lr_factor
from trainer.state import Progress, Shape, resume_shape, saved_progress


def test_trainer_imports_only_itself_torch_and_stdlib() -> None:
    for path in SOURCE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            assert not roots & {"ddptui", "numpy", "textual"}, f"{path.name}: {roots}"


def _ranks(task: SyntheticRegression, shape: Shape) -> list[Shards]:
    return [
        Shards(
            task,
            rank=r,
            world_size=shape.world_size,
            batch_size=shape.batch_size,
            grad_accum=shape.grad_accum,
            seed=3,
        )
        for r in range(shape.world_size)
    ]


def _steps(shards: list[Shards], epoch: int, start: int = 0) -> list[list[list[int]]]:
    """Each step's samples, rank by rank."""
    accum = shards[0].grad_accum
    per_rank = [s.epoch(epoch, start) for s in shards]
    return [
        [torch.cat(rank[k : k + accum]).tolist() for rank in per_rank]
        for k in range(0, len(per_rank[0]), accum)
    ]


def _flat(steps: list[list[list[int]]]) -> list[int]:
    return [i for ranks in steps for rank in ranks for i in rank]


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_ranks_take_disjoint_slices_of_each_step_and_an_epoch_covers_its_whole_steps(
    world_size: int,
) -> None:
    task = SyntheticRegression(samples=200, seed=0)
    shards = _ranks(task, Shape(world_size, 8, 1))
    global_batch = world_size * 8
    assert shards[0].steps_per_epoch == 200 // global_batch
    epochs = []
    for epoch in range(2):
        steps = _steps(shards, epoch)
        assert len(steps) == shards[0].steps_per_epoch
        for ranks in steps:
            assert [len(rank) for rank in ranks] == [8] * world_size
            assert len(set(_flat([ranks]))) == global_batch
        seen = _flat(steps)
        assert len(seen) == len(set(seen)) == shards[0].steps_per_epoch * global_batch
        epochs.append(steps)
    assert epochs[0][0] != epochs[1][0], "the second epoch is reshuffled"


# A global batch of 24 at every world size, with and without accumulation.
SHAPES_OF_24 = [Shape(1, 24, 1), Shape(1, 8, 3), Shape(2, 12, 1), Shape(2, 6, 2), Shape(3, 8, 1)]


def test_every_shape_of_one_global_batch_trains_on_the_same_samples_at_each_step() -> None:
    task = SyntheticRegression(samples=200, seed=0)
    for epoch in (0, 1):
        orders = {shape: _flat(_steps(_ranks(task, shape), epoch)) for shape in SHAPES_OF_24}
        # 8 whole steps of 24, in the epoch's order, whoever takes which part of a step.
        assert set(map(tuple, orders.values())) == {
            tuple(epoch_order(200, seed=3, epoch=epoch)[: 8 * 24].tolist())
        }
    assert not torch.equal(epoch_order(200, 3, 0), epoch_order(200, 3, 1))
    # Not seeded by seed + epoch, which would repeat one run's second epoch as another's first.
    assert not torch.equal(epoch_order(200, 0, 1), epoch_order(200, 1, 0))


def test_a_resume_on_fewer_ranks_sees_exactly_the_rest_of_the_epoch() -> None:
    task = SyntheticRegression(samples=200, seed=0)
    before = Shape(3, 8, 1)
    after = resume_shape(before, world_size=2, batch_size=8, grad_accum=1)
    assert after == Shape(2, 6, 2)
    done = 3  # steps of epoch 1 taken before the fault
    first = _steps(_ranks(task, before), epoch=1)[:done]
    rest = _steps(_ranks(task, after), epoch=1, start=done * 24)
    assert [len(rank) for ranks in rest for rank in ranks] == [12] * 2 * (8 - done)
    assert _flat(first + rest) == epoch_order(200, seed=3, epoch=1)[: 8 * 24].tolist()


@pytest.mark.parametrize(
    ("saved", "world_size", "batch_size", "grad_accum", "expected"),
    [
        (Shape(3, 8, 1), 3, 8, 1, Shape(3, 8, 1)),
        (Shape(3, 8, 1), 2, 8, 1, Shape(2, 6, 2)),
        (Shape(3, 8, 1), 2, 12, 1, Shape(2, 12, 1)),
        (Shape(3, 8, 1), 1, 8, 1, Shape(1, 8, 3)),
        # The fewest micro-batches that fit in 5, from the command line's 1: 3 of 4.
        (Shape(3, 8, 1), 2, 5, 1, Shape(2, 4, 3)),
        # Never fewer micro-batches than asked for.
        (Shape(3, 8, 1), 2, 8, 3, Shape(2, 4, 3)),
        # A larger batch asked for at the same world size keeps the checkpoint's global batch.
        (Shape(2, 16, 1), 2, 32, 1, Shape(2, 16, 1)),
        (Shape(2, 8, 3), 4, 32, 1, Shape(4, 12, 1)),
    ],
)
def test_a_resume_keeps_the_global_batch_with_the_fewest_micro_batches_that_fit(
    saved: Shape, world_size: int, batch_size: int, grad_accum: int, expected: Shape
) -> None:
    shape = resume_shape(saved, world_size, batch_size, grad_accum)
    assert shape == expected and shape.global_batch == saved.global_batch


def test_a_global_batch_that_does_not_split_over_the_ranks_is_refused_with_what_would() -> None:
    with pytest.raises(TrainerError) as refused:
        resume_shape(Shape(4, 24, 1), world_size=5, batch_size=24, grad_accum=1)
    assert "global batch of 96 samples does not split over 5 ranks" in str(refused.value)
    assert "(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96)" in str(refused.value)
    with pytest.raises(TrainerError, match="--grad-accum 4 or less"):
        resume_shape(Shape(2, 4, 1), world_size=2, batch_size=4, grad_accum=5)


def test_a_format_1_position_in_this_rank_s_micro_batches_becomes_samples_of_the_epoch() -> None:
    shape = {"world_size": 3, "batch_size": 8, "grad_accum": 2}
    old = {"format": 1, "shape": shape, "progress": {"step": 17, "epoch": 2, "batch_in_epoch": 10}}
    # 10 micro-batches of 8 on each of 3 ranks: 5 steps of 48.
    assert saved_progress(old) == Progress(step=17, epoch=2, samples_in_epoch=240)
    new = {"format": 2, "shape": shape, "progress": asdict(Progress(17, 2, 240))}
    assert saved_progress(new) == Progress(step=17, epoch=2, samples_in_epoch=240)


def test_char_text_windows_are_shifted_by_one() -> None:
    task = CharText("abcdefghij" * 3, block_size=4)
    x, y = task.batch(torch.tensor([0, 2]))
    assert x.shape == y.shape == (2, 4)
    assert torch.equal(x[:, 1:], y[:, :-1])
    with pytest.raises(TrainerError, match="too short"):
        CharText("abc", block_size=8)


def test_lr_warms_up_then_decays_to_the_floor() -> None:
    lrs = [lr_factor(s, warmup=4, total=20, floor=0.1) for s in range(25)]
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]
    assert all(a >= b for a, b in itertools.pairwise(lrs[3:]))
    assert math.isclose(lrs[20], 0.1) and math.isclose(lrs[24], 0.1)


def test_cli_rejects_non_positive_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args(["--grad-accum", "4"]).grad_accum == 4
    with pytest.raises(SystemExit):
        parse_args(["--batch-size", "0"])
    assert "must be ≥ 1" in capsys.readouterr().err
    assert parse_args(["--min-step-s", "0.05"]).min_step_s == 0.05
    for wrong in ("-1", "nan", "1e9"):
        with pytest.raises(SystemExit):
            parse_args(["--min-step-s", wrong])
        assert "must be between 0 and 3600 s" in capsys.readouterr().err


def test_max_steps_alone_is_the_run_s_length_and_epochs_given_still_end_it_first() -> None:
    assert parse_args([]).epochs == DEFAULT_EPOCHS
    # 200 steps asked for are 200 steps, however few batches an epoch has.
    assert parse_args(["--max-steps", "200"]).epochs >= 200
    assert parse_args(["--epochs", "3", "--max-steps", "200"]).epochs == 3


def _save(store: CheckpointStore, step: int) -> None:
    store.save({"progress": {"step": step}, "w": torch.full((64,), float(step))},
               step=step, epoch=0, world_size=2)  # fmt: skip


def test_store_keeps_the_newest_and_clears_stale_temporaries(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    (tmp_path / ".ckpt-000000001.pt.tmp").write_bytes(b"left by a killed writer")
    for step in (1, 2, 3):
        _save(store, step)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".lock",
        "ckpt-000000002.json", "ckpt-000000002.pt", "ckpt-000000003.json", "ckpt-000000003.pt",
    ]  # fmt: skip
    manifest = json.loads((tmp_path / "ckpt-000000003.json").read_text())
    assert manifest["step"] == 3 and manifest["world_size"] == 2
    assert manifest["bytes"] == (tmp_path / "ckpt-000000003.pt").stat().st_size


def test_a_rescue_gives_way_to_a_checkpoint_at_its_step_or_later(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    assert store.newest_step() == -1
    _save(store, 5)
    state = {"w": torch.zeros(1)}
    assert store.save(state, step=5, epoch=0, world_size=2, newer_only=True) is None
    assert store.save(state, step=4, epoch=0, world_size=2, newer_only=True) is None
    saved = store.save(state, step=6, epoch=0, world_size=2, newer_only=True)
    assert saved is not None and saved.path.name == "ckpt-000000006.pt"
    assert store.newest_step() == 6


def test_store_skips_damaged_checkpoints_newest_first(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=5)
    for step in (1, 2, 3, 4):
        _save(store, step)
    data = bytearray((tmp_path / "ckpt-000000004.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "ckpt-000000004.pt").write_bytes(bytes(data))
    (tmp_path / "ckpt-000000003.json").write_text("{not json")
    (tmp_path / "ckpt-000000002.pt").write_bytes(b"short")
    found = store.read_latest()
    assert found is not None
    _, manifest, skipped = found
    assert manifest.step == 1
    assert [Path(s.path).name for s in skipped] == [
        "ckpt-000000004.pt", "ckpt-000000003.pt", "ckpt-000000002.pt",
    ]  # fmt: skip
    assert "checksum" in skipped[0].reason and "manifest" in skipped[1].reason
    (tmp_path / "ckpt-000000001.pt").unlink()
    with pytest.raises(TrainerError, match="no valid checkpoint"):
        store.read_latest()
    with pytest.raises(TrainerError, match="checksum"):
        read_verified(tmp_path / "ckpt-000000004.json")


def test_events_are_whole_json_lines_with_identity(tmp_path: Path) -> None:
    log = EventLog(tmp_path, Placement(3, 1, 1, 4, 2, under_torchrun=True))
    log.emit("step", step=7, loss=None)
    log.emit("done", step=7, reason="completed")
    # Readers tail the file while it is written: every event must already be on disk.
    lines = (tmp_path / "events" / "rank3.jsonl").read_text().splitlines()
    log.close()
    first = json.loads(lines[0])
    assert first["v"] == 1 and first["type"] == "step" and first["loss"] is None
    assert (first["rank"], first["local_rank"], first["node_rank"], first["world_size"]) == (
        3,
        1,
        1,
        4,
    )
    assert json.loads(lines[1])["reason"] == "completed"


def test_step_events_reach_the_disk_on_their_own_while_the_main_thread_is_busy(
    tmp_path: Path,
) -> None:
    log = EventLog(tmp_path, Placement(0, 0, 0, 1, 1, under_torchrun=False))
    path = tmp_path / "events" / "rank0.jsonl"
    for step in range(1, 4):
        log.emit("step", step=step)
    # Nothing else is emitted, as when a collective hangs: the flusher alone must write them.
    deadline = time.monotonic() + 10 * EventLog.FLUSH_EVERY_S
    while path.stat().st_size == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3]
    log.emit("step", step=4)
    log.emit("checkpoint", step=4, path=tmp_path)  # written at once, after the step before it
    written = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["type"] for e in written][-2:] == ["step", "checkpoint"]
    assert written[-1]["path"] == str(tmp_path), "what JSON cannot hold is written as text"
    log.close()
    log.emit("step", step=5)  # after close: ignored, not an error
    assert len(path.read_text().splitlines()) == 5


def test_events_appends_to_an_existing_log_and_a_full_disk_turns_them_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    placement = Placement(0, 0, 0, 1, 1, under_torchrun=False)
    first = EventLog(tmp_path, placement)
    first.emit("done", step=1, reason="stopped")
    first.close()
    # A resumed run appends to the same file.
    resumed = EventLog(tmp_path, placement)
    resumed.emit("start", start_step=1)
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, resumed._fd)  # type: ignore[arg-type]
    os.close(full)
    resumed.emit("step", step=2)  # must not raise: training goes on without events
    resumed.emit("step", step=3)
    resumed.close()
    assert "events disabled" in capsys.readouterr().err
    lines = (tmp_path / "events" / "rank0.jsonl").read_text().splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["done", "start"]


def test_resident_memory_is_sampled_at_most_once_a_second() -> None:
    memory = _ResidentMemory()
    before = memory.read()["rss_mib"]
    ballast = b"\x01" * (256 * 2**20)  # written, so its pages are resident
    assert memory.read()["rss_mib"] == before, "read again within the second"
    memory._read_at -= _ResidentMemory.MAX_AGE_S
    assert memory.read()["rss_mib"] > before + 200
    del ballast


class _Arriving:
    """Stands in for a device copy: its values arrive when the test says so."""

    names = ("loss",)

    def __init__(self, loss: float, fails: bool = False) -> None:
        self.loss, self.fails = loss, fails
        self.arrived = False
        self.waited_for = False

    def ready(self) -> bool:
        return self.arrived

    def values(self) -> dict[str, float]:
        self.waited_for = not self.arrived
        if self.fails:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return {"loss": self.loss}


def _written(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_deferred_step_events_are_written_in_order_once_their_values_arrive(
    tmp_path: Path,
) -> None:
    log = EventLog(tmp_path, Placement(0, 0, 0, 1, 1, under_torchrun=False))
    path = tmp_path / "events" / "rank0.jsonl"
    first, second, third = _Arriving(3.0), _Arriving(2.0), _Arriving(1.0)
    log.defer(first, "step", step=1)
    queued_at = time.time()
    log.defer(second, "step", step=2)
    second.arrived = True
    log.poll()
    log._flush()
    # The second step's loss is in, but the first's is not: nothing may overtake it.
    assert path.read_text() == ""
    first.arrived = True
    log.defer(third, "step", step=3)
    log._flush()
    assert [(e["step"], e["loss"]) for e in _written(path)] == [(1, 3.0), (2, 2.0)]
    assert _written(path)[0]["time"] <= queued_at, "an event keeps the time of its step"
    # Another event queues behind the steps before it without waiting for their values (a
    # wait would drain the device's queue), and is written as soon as they are in.
    log.emit("epoch_end", step=3)
    assert not third.waited_for
    assert [e["type"] for e in _written(path)] == ["step", "step"]
    third.arrived = True
    log.poll()
    assert [e["type"] for e in _written(path)] == ["step", "step", "step", "epoch_end"]
    # A rank's last words wait: nothing before them may be lost with the process.
    fourth = _Arriving(0.5)
    log.defer(fourth, "step", step=4)
    log.emit("done", step=4)
    assert fourth.waited_for and not first.waited_for
    assert [e["type"] for e in _written(path)][-2:] == ["step", "done"]
    log.close()


def test_the_flusher_writes_deferred_events_while_the_main_thread_is_busy(tmp_path: Path) -> None:
    log = EventLog(tmp_path, Placement(0, 0, 0, 1, 1, under_torchrun=False))
    path = tmp_path / "events" / "rank0.jsonl"
    pending = _Arriving(0.5)
    log.defer(pending, "step", step=1)
    pending.arrived = True  # and no more calls from the "main thread", as in a hung collective
    deadline = time.monotonic() + 10 * EventLog.FLUSH_EVERY_S
    while path.stat().st_size == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [(e["step"], e["loss"]) for e in _written(path)] == [(1, 0.5)]
    log.close()


def test_close_and_a_failed_device_lose_no_deferred_event(tmp_path: Path) -> None:
    log = EventLog(tmp_path, Placement(0, 0, 0, 1, 1, under_torchrun=False))
    log.defer(_Arriving(1.5, fails=True), "step", step=1)
    log.defer(_Arriving(1.25), "step", step=2)
    log.emit("error", message="RuntimeError: CUDA error")
    log.defer(_Arriving(1.0), "step", step=3)
    log.close()
    written = _written(tmp_path / "events" / "rank0.jsonl")
    assert [(e["type"], e.get("loss")) for e in written] == [
        ("step", None),
        ("step", 1.25),
        ("error", None),
        ("step", 1.0),
    ]


def test_reduced_precision_enters_one_autocast_every_step() -> None:
    cfg = parse_args(["--run-dir", "unused", "--precision", "bf16"])
    autocast = _autocast(cfg, torch.device("cpu"))
    assert autocast() is autocast()
    for _ in range(2):
        with autocast():
            assert torch.get_autocast_dtype("cpu") == torch.bfloat16
            assert torch.is_autocast_enabled("cpu")
        assert not torch.is_autocast_enabled("cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_scalars_arrive_without_a_sync() -> None:
    pool = BufferPool()
    loss = torch.tensor(float("nan"), device="cuda")
    pending = DeviceScalars({"loss": loss, "other": loss + 1}, pool, convert=finite)
    torch.cuda.synchronize()
    assert pending.ready()
    assert pending.values() == {"loss": None, "other": None}
    # The first buffer, taken again from the pool, holds the new values.
    again = DeviceScalars({"a": torch.ones((), device="cuda"), "b": loss.nan_to_num(0.5)}, pool)
    assert again.values() == {"a": 1.0, "b": 0.5}


def test_tensor_bytes_are_the_tensor_s_bytes_up_to_the_size_asked() -> None:
    from trainer.dist import tensor_bytes

    data = bytes(range(256)) * 40
    tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    assert tensor_bytes(tensor) == data
    assert tensor_bytes(tensor, 300) == data[:300]
    assert tensor_bytes(tensor, 10**9) == data
    assert tensor_bytes(tensor[::2]) == data[::2]
    assert tensor_bytes(tensor[:0]) == b""


def test_a_checkpoint_sized_payload_reaches_the_other_rank_whole(tmp_path: Path) -> None:
    # Two ranks of a real gloo group: rank 1 receives 4 MiB, as a resume sends the checkpoint.
    script = tmp_path / "pair.py"
    script.write_text(
        "import hashlib, os, sys\n"
        "import torch.distributed as dist\n"
        "from trainer.dist import broadcast_bytes, broadcast_object\n"
        "rank = int(sys.argv[1])\n"
        f"dist.init_process_group('gloo', init_method='file://{tmp_path}/store', rank=rank,"
        " world_size=2)\n"
        "payload = os.urandom(4 << 20) if rank == 0 else None\n"
        "digest = broadcast_object(hashlib.sha256(payload).hexdigest() if rank == 0 else None,"
        " None)\n"
        "got = broadcast_bytes(payload, None)\n"
        "print(len(got), hashlib.sha256(got).hexdigest() == digest)\n"
        "dist.destroy_process_group()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SOURCE.parent)}
    ranks = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank)], env=env, stdout=subprocess.PIPE, text=True
        )
        for rank in (0, 1)
    ]
    outputs = [rank.communicate(timeout=120)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0]
    assert outputs == [f"{4 << 20} True\n"] * 2


@pytest.mark.parametrize(
    "backend",
    [
        "gloo",
        pytest.param(
            "nccl",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ),
    ],
)
def test_a_failed_rank_s_flight_recorder_dump_reads_as_its_last_collectives(
    tmp_path: Path, backend: str
) -> None:
    # One real rank, its recorder on as ddptui's launch turns it on.
    device = "cuda" if backend == "nccl" else "cpu"
    script = tmp_path / "one.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "from trainer.dist import dump_flight_recorder\n"
        f"dist.init_process_group('{backend}', init_method='file://{tmp_path}/store', rank=0,"
        " world_size=1)\n"
        f"dist.all_reduce(torch.ones(8, device='{device}'))\n"
        f"dist.broadcast(torch.ones(2, device='{device}'), 0)\n"
        "dump_flight_recorder(0)\n"
        "dist.destroy_process_group()\n"
    )
    prefix = tmp_path / "flight_"
    env = {**os.environ, "PYTHONPATH": str(SOURCE.parent)}
    env.update(TORCH_FR_BUFFER_SIZE="100", TORCH_NCCL_TRACE_BUFFER_SIZE="100")
    env.update(TORCH_FR_DUMP_TEMP_FILE=str(prefix))
    subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=120)
    trace = read_dump(0, Path(f"{prefix}0").read_bytes())
    assert [(c.op, c.sizes) for c in trace.collectives][-2:] == [
        (f"{backend}:all_reduce", "[[8]]"),
        (f"{backend}:broadcast", "[[2]]"),
    ]
