"""Fixtures of the runs tests: real runs of the bundled trainer on this CPU, shared by the
events, progress and diagnosis tests (each run's ``events/rank0.jsonl`` as raw lines)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.run.following.events import EventReader, RankEvent
from tests.trainer.launch import _env, install, wait_for

# No warm-up and no clipping: the first update at this rate makes every later loss NaN.
DIVERGE = ["--lr", "1e30", "--grad-clip", "0", "--warmup-steps", "0"]
SMALL = ["--samples", "320", "--batch-size", "32", "--width", "16", "--log-every", "1"]


def _trainer(run_dir: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**_env(), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "trainer", "--run-dir", str(run_dir), *SMALL, *args]
    return subprocess.Popen(
        argv, cwd=install(run_dir), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


@pytest.fixture(scope="session")
def cpu_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[bytes]]:
    """Four runs, at once: ``completed`` (30 steps, 3 epochs, checkpoints every 10),
    ``stopped`` through control/stop, ``failed`` (a checkpoint that does not exist) and
    ``diverged`` (a learning rate of 1e30: the loss is NaN from step 2)."""
    root = tmp_path_factory.mktemp("cpu-runs")
    procs = {
        "completed": _trainer(root / "completed", "--max-steps", "30", "--checkpoint-every", "10"),
        "failed": _trainer(root / "failed", "--resume", str(root / "no-such-checkpoint.pt")),
        "diverged": _trainer(root / "diverged", "--max-steps", "8", *DIVERGE),
        "stopped": _trainer(root / "stopped", "--max-steps", "1000000"),
    }
    events = root / "stopped" / "events" / "rank0.jsonl"
    wait_for(lambda: events.exists() and b'"step"' in events.read_bytes(), 120, "a step")
    (root / "stopped" / "control" / "stop").touch()
    for name, proc in procs.items():
        _, stderr = proc.communicate(timeout=120)
        expected = 1 if name == "failed" else 0
        assert proc.returncode == expected, stderr.decode(errors="replace")[-2000:]
    return {
        name: (root / name / "events" / "rank0.jsonl").read_bytes().splitlines() for name in procs
    }


@pytest.fixture(scope="session")
def cpu_events(cpu_runs: dict[str, list[bytes]]) -> dict[str, list[RankEvent]]:
    """:func:`cpu_runs`, every line read as an event (none may be garbled)."""
    parsed = {}
    for name, lines in cpu_runs.items():
        reader = EventReader()
        events = [event for line in lines if (event := reader.feed(line)) is not None]
        assert reader.garbled == 0 and len(events) == len(lines) > 0, name
        parsed[name] = events
    return parsed
