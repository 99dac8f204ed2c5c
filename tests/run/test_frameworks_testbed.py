"""Scripts written with Lightning, Hugging Face's Trainer and Accelerate, unchanged, run by
ddptui on the test bed as users run them (2 hosts of 2 processes, `[job] script`,
`checkpoint_files`): every rank's loss, speed and memory in `status --json` soon after its
first step; `dump` has every rank's stacks; a frozen rank makes the run hung (Lightning's);
stop, then resume from the framework's own newest checkpoint with the step count going on;
nothing left after.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable

from ddptui.run.evidence import kept as kept_dump
from ddptui.run.record import RunState
from ddptui.run.store import RunStore
from ddptui.ui.app import DdptuiApp
from tests.run.bed import (
    Cli,
    frozen,
    host_run_dir,
    run_pid,
    run_processes,
    wait_until,
    write_hosts,
)
from tests.testbed import TestBed, TestHost
from tests.ui.pilot import open_from_runs, until

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.xdist_group("frameworks-bed")]

FRAMEWORKS = Path(__file__).resolve().parents[1] / "fixtures" / "frameworks"
CASES = {
    "lightning": ("lightning_regression.py", ["out/checkpoints/last*.ckpt"]),
    "transformers": ("transformers_regression.py", ["out/checkpoint-*/*"]),
    "accelerate": ("accelerate_regression.py", ["out/state/*"]),
}
"""Each framework's script and where it saves its checkpoints (for `checkpoint_files`)."""
READS_STOP = ("lightning", "transformers")
FROZEN = ("lightning",)
"""Where a frozen rank is shown to hang the run: judging reads the same step events and
process states whatever wrote them, so one framework shows it (half a minute of CI each)."""
PROCS = 2
FIRST_LOSS_S = 20


def _events(hosts: list[TestHost], run_id: str) -> dict[int, list[dict[str, Any]]]:
    found: dict[int, list[dict[str, Any]]] = {}
    for host in hosts:
        for path in sorted((host_run_dir(host, run_id) / "events").glob("rank*.jsonl")):
            lines = path.read_text().splitlines()
            # A line being written is not whole yet.
            found[int(path.stem.removeprefix("rank"))] = [
                json.loads(line) for line in lines if line.endswith("}")
            ]
    return found


def _saved(events: list[dict[str, Any]]) -> bool:
    """Whether the rank stepped after the last checkpoint it began: the framework's save, which
    the training loop waits for, is whole on disk. A step of rank 0 takes every rank's
    gradients, so every rank's own part of the save (its RNG state) is whole too."""
    began = [
        index
        for index, event in enumerate(events)
        if event["type"] == "checkpoint" or event.get("phase") == "checkpoint"
    ]
    return bool(began) and any(event["type"] == "step" for event in events[began[-1] + 1 :])


def _told(hosts: list[TestHost], run_id: str) -> str:
    """The end of what each node's torchrun and ranks wrote: a failed stop's story."""
    said = []
    for host in hosts:
        node = host_run_dir(host, run_id)
        written = [*node.glob("node/attempt-*.out"), *node.glob("logs/attempt-*/**/*.*")]
        for path in sorted(written):
            tail = path.read_text(errors="replace").splitlines()[-12:]
            said.append(f"--- {host.name}: {path.relative_to(node)}\n" + "\n".join(tail))
    return "\n".join(said)


async def _console_losses(hosts_file: Path, store: Path, run_id: str, ranks: int) -> list[str]:
    """The loss column of the run screen, attached from the runs screen, once every rank's
    row has one."""
    app = DdptuiApp(hosts_file, store=RunStore(store))
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await open_from_runs(pilot, run_id)
        table = screen.query_one("#ranks", DataTable)

        def losses() -> list[str]:
            return [str(table.get_row_at(row)[3]) for row in range(table.row_count)]

        await until(
            pilot,
            "every rank's loss",
            lambda: len(losses()) == ranks and all(_number(cell) for cell in losses()),
            FIRST_LOSS_S,
        )
        return losses()


def _number(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


def _project(tmp_path: Path, script: str) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / script).write_text((FRAMEWORKS / script).read_text())
    return project / script


@pytest.mark.parametrize("framework", CASES)
def test_an_unchanged_framework_script_is_followed_judged_dumped_stopped_and_resumed(
    testbed: TestBed, tmp_path: Path, cli: Cli, framework: str
) -> None:
    hosts = testbed.hosts[:2]
    script, checkpoints = CASES[framework]
    # Trains until it is stopped, saving every 50 steps.
    env = {"env": {"EPOCHS": "100000", "SAVE_EVERY": "50"}}
    job = {
        "script": str(_project(tmp_path, script)),
        "args": [],
        "nproc_per_node": PROCS,
        "checkpoint_files": checkpoints,
    }
    hosts_file = write_hosts(
        testbed, tmp_path, hosts, job=job, host_overrides={host.name: env for host in hosts}
    )
    started = cli.run("launch", str(hosts_file), "--detach")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    ranks = range(len(hosts) * PROCS)

    # Every rank's own loss, speed and memory, from the events the site directory adds.
    def every_rank_measured() -> list[dict[str, Any]] | None:
        shown = cli.json("status", run_id)["ranks"]
        measured = [
            rank
            for rank in shown
            if rank["loss"] is not None and rank["samples_per_s"] and rank["rss_mib"]
        ]
        return shown if len(measured) == len(ranks) else None

    shown = wait_until("loss, speed and memory on every rank", every_rank_measured, 120, every=0.5)
    seen = time.time()
    first_step = min(
        event["time"]
        for events in _events(hosts, run_id).values()
        for event in events
        if event["type"] == "step"
    )
    assert seen - first_step <= FIRST_LOSS_S, (seen, first_step)
    assert sorted(rank["rank"] for rank in shown) == list(ranks)
    assert len({rank["loss"] for rank in shown}) > 1, shown
    starts = {rank: events[0] for rank, events in _events(hosts, run_id).items()}
    assert {start["task"] for start in starts.values()} == {framework}, starts
    # The console, attached: every rank's loss in its row.
    shown = asyncio.run(_console_losses(hosts_file, cli.store, run_id, len(ranks)))
    assert len(shown) == len(ranks)

    dumped = cli.run("dump", run_id)
    assert dumped.returncode == 0, dumped.stdout + dumped.stderr
    saved = Path(dumped.stdout.splitlines()[-1].rpartition(": ")[2])
    kept = kept_dump.load(saved).stacks
    assert [stack.rank for stack in kept] == list(ranks)
    assert all("File " in stack.text for stack in kept)

    if framework in FROZEN:
        frozen_pid = run_pid(hosts[1], run_id, b"LOCAL_RANK=0")
        with frozen(frozen_pid) as frozen_at:
            status = cli.status_once("hung", run_id, lambda run: run.state is RunState.HUNG, 90)
        # Judged (and recorded) within the window and a few judging rounds of the freeze.
        hung_at = next(c.time for c in cli.record(run_id).states if c.state is RunState.HUNG)
        assert hung_at - frozen_at <= 35, (hung_at, frozen_at)
        odd = [(rank["rank"], rank["host"]) for rank in status["hang"]["ranks"] if rank["why"]]
        assert odd == [(PROCS, hosts[1].name)], status["hang"]
        wait_until("stepping again", lambda: cli.record(run_id).state is RunState.RUNNING, 90)

    # A checkpoint the framework saved, then the stop.
    wait_until("a whole checkpoint", lambda: _saved(_events(hosts, run_id)[0]), 120, every=0.5)
    stopped = cli.run("stop", run_id)
    assert stopped.returncode == 0, stopped.stderr + _told(hosts, run_id)
    assert not run_processes(hosts, run_id)
    # Lightning and the Trainer read ddptui's stop request: every rank checkpoints at one step
    # and ends; an Accelerate script has no loop to end and is sent SIGTERM.
    graceful = "every node stopped on its own after checkpointing" in stopped.stderr
    assert graceful is (framework in READS_STOP), stopped.stderr + _told(hosts, run_id)
    # A clean stop: what it caused (torchrun told to stop, ranks whose peers it ended first)
    # is no error.
    assert cli.json("status", run_id)["errors"] == [], _told(hosts, run_id)
    reached = {
        rank: max(event["step"] for event in events if event["type"] == "step")
        for rank, events in _events(hosts, run_id).items()
    }

    resumed = cli.run("resume", run_id, "--detach")
    assert resumed.returncode == 0, resumed.stderr

    def resumed_and_stepping() -> dict[int, dict[str, Any]] | None:
        events = _events(hosts, run_id)
        second: dict[int, dict[str, Any]] = {}
        for rank in ranks:
            starts = [event for event in events.get(rank, []) if event["type"] == "start"]
            if len(starts) < 2:
                return None
            after = events[rank][events[rank].index(starts[1]) :]
            if len([event for event in after if event["type"] == "step"]) < 5:
                return None
            second[rank] = starts[1]
        return second

    def resume_story() -> str:
        shown = cli.run("status", run_id)
        return shown.stdout + shown.stderr + _told(hosts, run_id)

    second = wait_until(
        "every rank resumed and stepping",
        resumed_and_stepping,
        180,
        every=0.5,
        story=resume_story,
    )
    for rank, start in second.items():
        # From the framework's own newest checkpoint: a step it had reached, its steps after it.
        assert 0 < start["start_step"] <= reached[rank], (start, reached[rank])
        if framework in READS_STOP:
            assert start["start_step"] == reached[rank], (start, reached[rank])
        assert start["resumed_from"], start
        steps = [
            event["step"]
            for event in _events(hosts, run_id)[rank]
            if event["type"] == "step" and event["time"] > start["time"]
        ]
        assert steps[:3] == [start["start_step"] + n for n in (1, 2, 3)], (rank, steps[:3])
    assert cli.run("stop", run_id).returncode == 0
    assert not run_processes(hosts, run_id)


def test_without_instrumenting_a_lightning_script_its_loss_is_read_from_its_progress_bar(
    testbed: TestBed, tmp_path: Path, cli: Cli
) -> None:
    """Lightning's default bar is rich's live display, which writes nothing into a pipe until
    it ends unless TTY_COMPATIBLE=1 says the pipe takes terminal output."""
    hosts = testbed.hosts[:2]
    job = {
        "script": str(_project(tmp_path, CASES["lightning"][0])),
        "args": [],
        "nproc_per_node": PROCS,
        "instrument": False,
    }
    env = {"env": {"EPOCHS": "100000", "SAVE_EVERY": "1000000"}}
    hosts_file = write_hosts(
        testbed, tmp_path, hosts, job=job, host_overrides={host.name: env for host in hosts}
    )
    started = cli.run("launch", str(hosts_file), "--detach")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()

    def rank_0_loss() -> float | None:
        shown = cli.json("status", run_id)["ranks"]
        return next((rank["loss"] for rank in shown if rank["rank"] == 0), None)

    assert wait_until("rank 0's loss from its output", rank_0_loss, 120, every=0.5) > 0
    # The agent makes the events directory (with its own mode); no rank wrote into it.
    assert not any(any((host_run_dir(host, run_id) / "events").iterdir()) for host in hosts)
    stopped = cli.run("stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    assert not run_processes(hosts, run_id)
