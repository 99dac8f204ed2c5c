"""In-process checks of the trainer's pure parts: sharding, schedule, checkpoint files, events."""

from __future__ import annotations

import ast
import itertools
import json
import math
import os
import time
from pathlib import Path

import pytest
import torch

from tests.trainer.launch import SOURCE
from trainer.checkpoint import CheckpointStore, read_verified
from trainer.cli import parse_args
from trainer.data import CharText, Shards, SyntheticRegression
from trainer.dist import Placement, TrainerError
from trainer.events import EventLog, _ResidentMemory
from trainer.loop import lr_factor


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


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_shards_are_disjoint_cover_the_epoch_and_reshuffle(world_size: int) -> None:
    task = SyntheticRegression(samples=200, seed=0)
    shards = [
        Shards(task, rank=r, world_size=world_size, batch_size=8, seed=3) for r in range(world_size)
    ]
    epochs = []
    for epoch in range(2):
        seen = [torch.cat(s.epoch(epoch)).tolist() for s in shards]
        flat = [i for rank in seen for i in rank]
        assert len(flat) == len(set(flat)) == world_size * shards[0].batches_per_epoch * 8
        epochs.append(seen)
    assert epochs[0][0] != epochs[1][0]
    # Skipping consumed batches yields exactly the rest of the epoch.
    rest = shards[0].epoch(1, skip=2)
    assert torch.equal(torch.stack(rest), torch.stack(shards[0].epoch(1)[2:]))


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


def _save(store: CheckpointStore, step: int) -> None:
    store.save({"progress": {"step": step}, "w": torch.full((64,), float(step))},
               step=step, epoch=0, world_size=2)  # fmt: skip


def test_store_keeps_the_newest_and_clears_stale_temporaries(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    (tmp_path / ".ckpt-000000001.pt.tmp").write_bytes(b"left by a killed writer")
    for step in (1, 2, 3):
        _save(store, step)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-000000002.json", "ckpt-000000002.pt", "ckpt-000000003.json", "ckpt-000000003.pt",
    ]  # fmt: skip
    manifest = json.loads((tmp_path / "ckpt-000000003.json").read_text())
    assert manifest["step"] == 3 and manifest["world_size"] == 2
    assert manifest["bytes"] == (tmp_path / "ckpt-000000003.pt").stat().st_size


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
