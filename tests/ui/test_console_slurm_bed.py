"""The console on a Slurm cluster, in a real terminal: tmux runs ``python -m ddptui slurm.toml``
against the Slurm bed (3 nodes, no sshd on them). The health screen lists Slurm's nodes; ``l``
submits the run; the run screen shows every rank's loss; ``s`` stops it, ``r`` resumes it as a
new job; the runs screen lists it with its jobs."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomli_w

from ddptui.run.record import RunState
from ddptui.run.store import RunStore
from tests.run.bed import PACED
from tests.testbed.cluster import BED_TORCH_IMPORT_TIMEOUT_S
from tests.testbed.slurm import PARTITION, SlurmBed
from tests.ui.pilot import kill_live_runs
from tests.ui.terminal import Terminal

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

NODES, PROCS = 3, 2
SMALL = ("--width", "64", "--depth", "2", "--max-steps", "100000", *PACED)
RANK_ROW = re.compile(r"^\s*\d+ node\d+\s+(\d+)\s+\d+\s+(\d\.\d+(?:e-\d+)?)\s", re.MULTILINE)
"""A rank row of the run screen: node and host, rank, step, then a loss like 0.5432."""
USABLE_NODE = re.compile(r"^\s*node\d\s+debug\s+idle\s+—\s+yes\b", re.MULTILINE)


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    term = Terminal(f"ddptui-slurm-test-{os.getpid()}")
    yield term
    term.close()


def _slurm_file(tmp_path: Path) -> Path:
    document = {
        "cluster": {
            "python": sys.executable,
            "workdir": str(tmp_path / "shared"),
            "torch_import_timeout": BED_TORCH_IMPORT_TIMEOUT_S,
        },
        "slurm": {"nodes": NODES, "partition": PARTITION, "time": "10"},
        "job": {"nproc_per_node": PROCS, "args": list(SMALL)},
    }
    path = tmp_path / "slurm.toml"
    path.write_text(tomli_w.dumps(document))
    return path


def _ranks_with_losses(text: str) -> set[int]:
    return {int(rank) for rank, loss in RANK_ROW.findall(text) if float(loss) > 0}


def test_the_console_checks_launches_follows_stops_and_resumes_a_slurm_run(
    slurm_bed: SlurmBed, tmp_path: Path, terminal: Terminal
) -> None:
    assert PARTITION == "debug", "USABLE_NODE reads the bed's partition"
    state = tmp_path / "state"
    env = {"XDG_STATE_HOME": str(state), "SLURM_CONF": str(slurm_bed.conf)}
    terminal.start([sys.executable, "-m", "ddptui", str(_slurm_file(tmp_path))], env)
    store = RunStore(state / "ddptui" / "runs")
    try:
        # The health screen: Slurm's nodes, each one a run may get.
        text = terminal.wait_for(
            "Slurm's nodes", lambda t: len(USABLE_NODE.findall(t)) == NODES, 120
        )
        assert f"healthy: partition {PARTITION}, {NODES} of {NODES} nodes usable" in text, text

        terminal.keys("l")
        text = terminal.wait_for("the launch plan", lambda t: "launch this run?" in t, 60)
        assert f"{NODES} node(s) × {PROCS} = {NODES * PROCS} ranks, backend gloo" in text, text
        terminal.keys("y")
        text = terminal.wait_for(
            "every rank's loss",
            lambda t: _ranks_with_losses(t) == set(range(NODES * PROCS)),
            240,
        )
        (record,) = store.records()
        job = record.job_id
        assert job is not None and record.state is RunState.RUNNING

        terminal.keys("s")
        terminal.wait_for("the stop confirmation", lambda t: "stop the run?" in t, 30)
        terminal.keys("y")
        terminal.wait_for(
            "the run stopped",
            lambda t: store.load(record.id).state is RunState.STOPPED,
            180,
        )

        # Under the whole suite's load a starved slurmd can miss SlurmdTimeout (10 s on the
        # bed) and Slurm marks its node down, so the new job would wait (the console says so:
        # "job 9 pending: Nodes required for job are DOWN…"). The bed at rest first.
        slurm_bed.idle()
        terminal.keys("r")
        text = terminal.wait_for(
            "attempt 2's losses",
            lambda t: "attempt 2" in t and _ranks_with_losses(t) == set(range(NODES * PROCS)),
            240,
        )
        resumed = store.load(record.id)
        assert resumed.attempt.number == 2 and resumed.job_id not in (None, job)

        # The runs screen: the run with both of its jobs. A key apiece: an escape followed at
        # once by a key reads as alt and that key.
        terminal.keys("escape")
        terminal.wait_for("the health screen", lambda t: "nodes · " in t, 30)
        terminal.keys("R")
        listed = re.compile(rf"{record.id} .*jobs {job}, {resumed.job_id} on node")
        terminal.wait_for("the run and its jobs on the runs screen", listed.search, 30)
        terminal.keys("q")
        terminal.wait_for("the shell after the console", lambda t: "runs, newest" not in t, 30)
    finally:
        asyncio.run(kill_live_runs(store))
