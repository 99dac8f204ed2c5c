"""The frameworks' events: each framework's smallest script, unchanged, run by real torchrun on
2 ranks with the site directory a node's start writes (the stack handler and
``ddptui_instrument.py``), writes ddptui's events for every rank; with ``DDPTUI_INSTRUMENT=0``
it writes none; a hook that fails is one warning and the script goes on; and nothing is
imported that the script did not import.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ddptui.onhost.processes import stack_site
from ddptui.plan.launch import UNINSTRUMENTED_ENV
from ddptui.run.following.logloss import LossReader

FRAMEWORKS = Path(__file__).resolve().parents[1] / "fixtures" / "frameworks"
SCRIPTS = {
    "lightning": "lightning_regression.py",
    "transformers": "transformers_regression.py",
    "accelerate": "accelerate_regression.py",
}
STEPS = 64
"""Each script's optimizer steps: 2,048 samples, 32 a rank, 2 ranks, 2 epochs."""


def torchrun(
    tmp_path: Path, script: str, run_dir: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """``script`` on 2 ranks from ``tmp_path`` (its working directory), the ranks' site
    directory first on their path as a node's start puts it."""
    site = stack_site(tmp_path / "site-run")
    assert site is not None
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", script],
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": str(site),
            "DDPTUI_RUN_DIR": str(run_dir),
            "OMP_NUM_THREADS": "1",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=240,
    )


AT_EXIT_ABORT = "terminate called without an active exception"
"""How a rank of these tiny scripts sometimes ends after it has trained (about 1 run in 10 on a
loaded machine, without ddptui too): torch 2.13's gloo worker thread releases the last
allreduce's work, which holds a Python object, while the interpreter finalizes; the thread
cannot take the GIL and the C++ runtime aborts (gdb on the core: ``ProcessGroupGloo::runLoop``
→ ``~AsyncAllreduceWork`` → ``take_gil`` → ``pthread_exit`` → ``std::terminate``). The ranks now
wait for each other at exit once their training ended (``instrument._exit_together``), which
made it rare (0 of 40 runs of a 4-rank DDP script under load, against 5 of 20 without)."""


def trained(ran: subprocess.CompletedProcess[str], run_dir: Path) -> None:
    """Both ranks trained to the end: torchrun succeeded, or a rank aborted as above after
    both had written their ``done`` event."""
    if ran.returncode != 0 and AT_EXIT_ABORT in ran.stderr:
        for rank in (0, 1):
            assert events(run_dir, rank)[-1]["type"] == "done", ran.stderr[-3000:]
        return
    assert ran.returncode == 0, ran.stderr[-3000:]


def events(run_dir: Path, rank: int) -> list[dict[str, Any]]:
    lines = (run_dir / "events" / f"rank{rank}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def staged(tmp_path: Path, framework: str) -> str:
    script = SCRIPTS[framework]
    (tmp_path / script).write_text((FRAMEWORKS / script).read_text())
    return script


@pytest.mark.slow
@pytest.mark.parametrize("framework", SCRIPTS)
def test_an_unchanged_script_writes_every_rank_s_own_events(tmp_path: Path, framework: str) -> None:
    run_dir = tmp_path / "run"
    ran = torchrun(tmp_path, staged(tmp_path, framework), run_dir)
    trained(ran, run_dir)
    assert "ddptui:" not in ran.stderr
    losses = {}
    for rank in (0, 1):
        seen = events(run_dir, rank)
        start = seen[0]
        assert start["type"] == "start" and start["task"] == framework
        assert (start["rank"], start["world_size"], start["start_step"]) == (rank, 2, 0)
        assert start["versions"][framework] and start["backend"] == "gloo"
        steps = [event for event in seen if event["type"] == "step"]
        assert [event["step"] for event in steps] == list(range(1, STEPS + 1))
        for event in steps:
            assert math.isfinite(event["loss"]) and event["loss"] > 0
            assert event["samples_per_s"] > 0 and event["step_time_s"] > 0
            assert event["rss_mib"] > 50
        assert seen[-1]["type"] == "done" and seen[-1]["reason"] == "completed"
        assert seen[-1]["step"] == STEPS
        losses[rank] = [event["loss"] for event in steps]
    # Each rank's own loss on its own shard of the data, not one number logged for all.
    assert losses[0] != losses[1]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("framework", "saved_at", "checkpoint", "last"),
    [
        # The script written with Accelerate saves as its epoch ends and trains all its epochs
        # again. Lightning's and the Trainer's resumes, which ddptui's stop ends at a step of
        # its choosing, are held to the step by tests/run/test_frameworks_testbed.py.
        ("accelerate", STEPS // 2, "out/state", STEPS // 2 + STEPS),
    ],
)
def test_a_resumed_run_says_from_where_and_its_steps_continue(
    tmp_path: Path, framework: str, saved_at: int, checkpoint: str, last: int
) -> None:
    run_dir = tmp_path / "run"
    script = staged(tmp_path, framework)
    trained(torchrun(tmp_path, script, run_dir, EPOCHS="1"), run_dir)
    trained(torchrun(tmp_path, script, run_dir, EPOCHS="2"), run_dir)
    for rank in (0, 1):
        seen = events(run_dir, rank)
        starts = [event for event in seen if event["type"] == "start"]
        assert [start["start_step"] for start in starts] == [0, saved_at]
        assert starts[1]["resumed_from"] == str(tmp_path / checkpoint)
        steps = [event["step"] for event in seen if event["type"] == "step"]
        assert steps == [*range(1, STEPS // 2 + 1), *range(saved_at + 1, last + 1)]
        assert {event["phase"] for event in seen if event["type"] == "phase"} >= {"checkpoint"}


@pytest.mark.slow
# Transformers only, run for real: Lightning's uninstrumented bar is read on the test bed
# (tests/run/test_frameworks_testbed.py), and every framework's recorded output is read by
# test_the_frameworks_recorded_output_gives_a_loss.
@pytest.mark.parametrize(("framework", "at_least"), [("transformers", 6)])
def test_without_instrumenting_the_script_is_left_alone_and_its_output_has_a_loss(
    tmp_path: Path, framework: str, at_least: int
) -> None:
    run_dir = tmp_path / "run"
    for again in (tmp_path / "again", None):
        ran = torchrun(tmp_path, staged(tmp_path, framework), run_dir, **UNINSTRUMENTED_ENV)
        if again is None or AT_EXIT_ABORT not in ran.stderr:
            break
        # No events to say it trained to the end: the script again, from the start.
        again.mkdir()
        tmp_path = again
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert not (run_dir / "events").exists()
    read = [LossReader().read(line) for line in ran.stdout.split("\n")]
    assert len([loss for loss in read if loss is not None]) >= at_least


@pytest.mark.slow
def test_a_hook_that_fails_is_one_warning_a_rank_and_the_script_goes_on(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "run"
    not_a_directory.write_text("a file where the run's directory should be\n")
    ran = torchrun(tmp_path, staged(tmp_path, "lightning"), not_a_directory)
    # Its end, below, says it trained to the end.
    assert ran.returncode == 0 or AT_EXIT_ABORT in ran.stderr, ran.stderr[-3000:]
    warnings = [line for line in ran.stderr.splitlines() if line.startswith("ddptui:")]
    assert len(warnings) == 2, warnings
    assert all("no events from this rank" in line for line in warnings)
    assert "Trainer.fit` stopped: `max_epochs=2` reached" in ran.stderr + ran.stdout


def test_nothing_is_imported_that_the_script_did_not_import(tmp_path: Path) -> None:
    site = stack_site(tmp_path / "run")
    assert site is not None
    heavy = {"torch", "lightning", "pytorch_lightning", "transformers", "accelerate", "numpy"}
    ran = subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sorted(sys.modules)))"],
        env={
            **os.environ,
            "PYTHONPATH": str(site),
            "DDPTUI_RUN_DIR": str(tmp_path / "run"),
            "RANK": "0",
        },
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = set(json.loads(ran.stdout))
    assert "ddptui_instrument" in loaded
    assert not {name.split(".")[0] for name in loaded} & heavy


@pytest.mark.parametrize(
    ("recording", "at_least"),
    [
        ("lightning-2.6.6.rank0.stdout.log", 20),
        ("transformers-5.25.0.rank0.stdout.log", 6),
        ("accelerate-1.16.0.rank0.stdout.log", 2),
    ],
)
def test_the_frameworks_recorded_output_gives_a_loss(recording: str, at_least: int) -> None:
    reader = LossReader()
    # Split as the follower splits: at newlines only (str.splitlines also splits at "\r").
    lines = (FRAMEWORKS / recording).read_text().split("\n")
    read = [found for found in map(reader.read, lines) if found is not None]
    assert len(read) >= at_least
    assert all(math.isfinite(found.loss) and 0 < found.loss < 10 for found in read)


class _Distributed:
    """torch.distributed as ``_exit_together`` sees it: its backend, and the barriers asked."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.waited: list[float] = []

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def get_backend(self) -> str:
        return self.backend

    def barrier(self, async_op: bool = False) -> Any:
        assert async_op, "a barrier at exit must not wait without a deadline"
        return self

    def wait(self, timeout: Any) -> None:
        self.waited.append(timeout.total_seconds())


@pytest.mark.parametrize(
    ("ended", "error", "backend", "waits"),
    [
        (True, None, "gloo", True),
        (False, None, "gloo", False),
        (True, RuntimeError("boom"), "gloo", False),
        (True, None, "nccl", False),
    ],
    ids=["trained", "never ended", "raised", "nccl"],
)
def test_a_rank_whose_training_ended_waits_for_its_peers_at_exit_on_gloo_only(
    monkeypatch: pytest.MonkeyPatch, ended: bool, error: Exception | None, backend: str, waits: bool
) -> None:
    from ddptui.onhost import instrument

    distributed = _Distributed(backend)
    monkeypatch.setitem(sys.modules, "torch.distributed", distributed)
    monkeypatch.setattr(instrument, "ENDED", [True] if ended else [])
    monkeypatch.setattr(instrument, "ERRORS", [error] if error else [])
    instrument._exit_together()
    assert distributed.waited == ([instrument.EXIT_TOGETHER_S] if waits else [])


RANK_THAT_TRAINED = """
import atexit, datetime, sys, types
import ddptui_instrument

class Work:
    def wait(self, timeout):
        print("barrier", timeout.total_seconds(), flush=True)

distributed = types.ModuleType("torch.distributed")
distributed.is_available = lambda: True
distributed.is_initialized = lambda: True
distributed.get_backend = lambda: "gloo"
distributed.barrier = lambda async_op=False: Work()
sys.modules["torch.distributed"] = distributed
atexit.register(print, "the script's own exit handler", flush=True)
ddptui_instrument.ENDED.append(True)
"""
"""A rank whose training ended on gloo, torch.distributed standing in for torch: it ends with
what its exit handlers print."""


def test_a_rank_started_with_the_instrumentation_waits_for_its_peers_as_it_exits(
    tmp_path: Path,
) -> None:
    # A rank's own process as a node's start makes it, so what is checked is that the barrier
    # runs at exit at all: the real torchrun tests above forgive the abort it prevents.
    site = stack_site(tmp_path / "site-run")
    assert site is not None
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    ran = subprocess.run(
        [sys.executable, "-c", RANK_THAT_TRAINED],
        cwd=tmp_path,
        env={
            **environment,
            "PYTHONPATH": str(site),
            "DDPTUI_RUN_DIR": str(tmp_path / "run"),
            "RANK": "0",
            "WORLD_SIZE": "2",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr == ""
    # After the script's own exit handlers (and the frameworks'), which may still talk to peers.
    from ddptui.onhost import instrument

    waited = f"barrier {instrument.EXIT_TOGETHER_S}"
    assert ran.stdout.splitlines() == ["the script's own exit handler", waited]


RANK_0_WATCHED = """
import os, time
from pathlib import Path

pids = Path("pids")
pids.mkdir(exist_ok=True)
(pids / f"rank{os.environ['RANK']}.tmp").write_text(str(os.getpid()))
(pids / f"rank{os.environ['RANK']}.tmp").rename(pids / f"rank{os.environ['RANK']}")
if os.environ["RANK"] == "1":
    while not (pids / "rank0").exists():
        time.sleep(0.05)
    rank_0 = Path("/proc") / (pids / "rank0").read_text() / "stat"
    time.sleep(3)  # rank 0 has long reached its exit: is it there still?
    state = rank_0.read_text().rsplit(")", 1)[1].split()[0] if rank_0.exists() else "gone"
    Path("rank 0 as rank 1 ends").write_text(state)
"""
"""Appended to a framework's script: each rank says its pid; rank 1 lingers 3 s after its
training, then writes the state of rank 0's process (``S``: waiting; ``Z`` or gone: exited)."""


@pytest.mark.slow
def test_on_a_real_gloo_run_a_rank_that_ended_waits_at_exit_for_a_slower_peer(
    tmp_path: Path,
) -> None:
    script = staged(tmp_path, "accelerate")
    (tmp_path / script).write_text((tmp_path / script).read_text() + RANK_0_WATCHED)
    run_dir = tmp_path / "run"
    ran = torchrun(tmp_path, script, run_dir, EPOCHS="1")
    # No abort forgiven here: the wait at exit is what prevents it.
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert (tmp_path / "rank 0 as rank 1 ends").read_text() not in ("Z", "gone"), ran.stderr
    assert [events(run_dir, rank)[-1]["type"] for rank in (0, 1)] == ["done", "done"]
