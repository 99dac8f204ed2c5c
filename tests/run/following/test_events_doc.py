"""docs/events.md: its writer runs and ddptui reads what it writes; its tables match the reader."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import typing
from pathlib import Path

from ddptui.run.following.events import (
    EVENT_TYPES,
    CheckpointEvent,
    DoneEvent,
    EpochEndEvent,
    ErrorEvent,
    EventBase,
    EventReader,
    StartEvent,
    StepEvent,
    StopRequestedEvent,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "events.md"
TEXT = DOC.read_text(encoding="utf-8")
WRITER = re.findall(r"```python\n(.*?)```", TEXT, re.DOTALL)[0]
USE = """
emit("start", total_steps=3, config={"lr": 0.1}, hostname="gpu-b", pid=42)
for step in (1, 2, 3):
    emit("step", step=step, epoch=0, loss=1.0 / step if step != 2 else float("nan"), lr=0.1)
emit("checkpoint", path="/runs/x/ckpt.pt", step=3, epoch=0, seconds=0.5, bytes=1024)
emit("epoch_end", epoch=0, step=3)
emit("stop_requested", step=3, source="SIGTERM")
emit("done", step=3, reason="stopped")
emit("error", message="ValueError: x\\ny", traceback="Traceback (most recent call last):\\n")
"""
TORCHRUN_ENV = {"RANK": "3", "LOCAL_RANK": "1", "GROUP_RANK": "1", "WORLD_SIZE": "4"}


def _run(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # -I -S: no site-packages and no user paths, so the writer needs nothing but the stdlib.
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", WRITER + USE],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_writer_is_ten_lines() -> None:
    assert len([line for line in WRITER.splitlines() if line.strip()]) <= 10


def test_what_the_docs_writer_writes_is_read_back_as_written(tmp_path: Path) -> None:
    result = _run({**TORCHRUN_ENV, "DDPTUI_RUN_DIR": str(tmp_path / "run")}, tmp_path)
    assert result.returncode == 0, result.stderr
    reader = EventReader()
    lines = (tmp_path / "run" / "events" / "rank3.jsonl").read_bytes().splitlines()
    events = [reader.feed(line) for line in lines]
    assert reader.garbled == 0
    assert [type(e) for e in events] == [
        StartEvent, StepEvent, StepEvent, StepEvent, CheckpointEvent, EpochEndEvent,
        StopRequestedEvent, DoneEvent, ErrorEvent,
    ]  # fmt: skip
    for event in events:
        assert event is not None
        ids = (event.rank, event.local_rank, event.node_rank, event.world_size)
        assert ids == (3, 1, 1, 4)
    start, step1, step2 = events[:3]
    assert isinstance(start, StartEvent) and start.total_steps == 3 and start.pid == 42
    assert isinstance(step1, StepEvent) and step1.loss == 1.0 and step1.lr == 0.1
    # json.dumps writes NaN, which JSON lacks; ddptui reads it as a loss that was not finite.
    assert isinstance(step2, StepEvent) and step2.loss is None and step2.step == 2
    error = events[-1]
    assert isinstance(error, ErrorEvent) and error.message == "ValueError: x\ny"


def test_outside_ddptui_the_writer_writes_nothing(tmp_path: Path) -> None:
    result = _run({**TORCHRUN_ENV, "HOME": str(tmp_path)}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.iterdir()) == []


def _documented_fields() -> dict[str, set[str]]:
    """``### `type` …`` sections → the backquoted names in the first column of their table."""
    found: dict[str, set[str]] = {}
    for kind, body in re.findall(
        r"^### `(\w+)`.*?\n(.*?)(?=^#|\Z)", TEXT, re.DOTALL | re.MULTILINE
    ):
        cells = re.findall(r"^\| ([^|]+) \|", body, re.MULTILINE)
        found[kind] = {name for cell in cells for name in re.findall(r"`(\w+)`", cell)}
    return found


def test_every_field_ddptui_reads_is_documented_and_nothing_else() -> None:
    common = {f.name for f in dataclasses.fields(EventBase)}
    documented = _documented_fields()
    assert set(documented) == set(EVENT_TYPES)
    for kind, cls in EVENT_TYPES.items():
        assert documented[kind] == {f.name for f in dataclasses.fields(cls)} - common, kind
    assert re.findall(r"^\| `(\w+)` \|", TEXT.split("### ")[0], re.MULTILINE) == [
        "v", "type", *(f.name for f in dataclasses.fields(EventBase)),
    ]  # fmt: skip


def test_every_number_with_a_cap_has_it_documented() -> None:
    limits = TEXT.split("\n## Limits\n")[1].split("\n## ")[0]
    documented = set(re.findall(r"`(\w+)`", limits))
    # A loss and a learning rate are whatever they are; every other number has a cap.
    numbers = {
        f.name
        for cls in EVENT_TYPES.values()
        for f in dataclasses.fields(cls)
        if typing.get_type_hints(cls)[f.name] == float | None
    } - {"loss", "lr"}
    memory = {name for name in numbers if re.fullmatch(r"cuda_\w+_mib", name)}
    assert "`cuda_*_mib`" in limits and memory
    assert numbers - memory <= documented
    assert {"time", "launch"} <= documented
