"""The console in a real terminal: tmux runs ``python -m ddptui HOSTS`` on the test bed; keys go
in with ``send-keys`` and the screen comes back with ``capture-pane``: the hosts, then losses
arriving, then the stop confirmation, and the run stops cleanly."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.run.record import RunState
from ddptui.run.store import RunStore
from tests.run.bed import SMALL
from tests.testbed import TestBed
from tests.ui.pilot import kill_live_runs
from tests.ui.terminal import Terminal

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

ENDLESS = [*SMALL, "--max-steps", "100000"]
"""The test bed's paced small model, until it is stopped."""
# A rank row of the run screen: node and host, rank, step, then a loss like 0.5432 or 1.2e-05.
OK = re.compile(r"\bok\b")
"""A host's status cell on the health screen once its check passed."""
RANK_ROW = re.compile(r"^\s*\d+ node\d+\s+\d+\s+\d+\s+(\d\.\d+(?:e-\d+)?)\s", re.MULTILINE)


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    term = Terminal(f"ddptui-test-{os.getpid()}")
    yield term
    term.close()


def test_the_console_in_tmux_launches_shows_losses_and_stops(
    testbed: TestBed, tmp_path: Path, terminal: Terminal
) -> None:
    hosts = testbed.hosts[:2]
    hosts_file = testbed.write_hosts_file(
        tmp_path / "hosts.toml", hosts, job={"nproc_per_node": 2, "args": ENDLESS}
    )
    state = tmp_path / "state"
    terminal.start(
        [sys.executable, "-m", "ddptui", str(hosts_file)], {"XDG_STATE_HOME": str(state)}
    )
    store = RunStore(state / "ddptui" / "runs")
    try:
        text = terminal.wait_for("both hosts checked", lambda t: len(OK.findall(t)) == 2, 120)
        assert all(host.name in text for host in hosts)

        terminal.keys("l")
        text = terminal.wait_for("the launch plan", lambda t: "launch this run?" in t, 60)
        assert "2 host(s), 4 ranks, backend gloo" in text
        terminal.keys("y")
        text = terminal.wait_for("losses", lambda t: len(RANK_ROW.findall(t)) == 4, 180)
        assert all(float(loss) > 0 for loss in RANK_ROW.findall(text))

        terminal.keys("t")
        # The run screen's footer already says "launch of attempt 1: first step in …", so only
        # the pane's bars show that the key opened it.
        terminal.wait_for(
            "the launch timeline's bars",
            lambda t: all(re.search(rf"{host.name} █+ \d+\.\d s", t) for host in hosts),
            60,
        )

        terminal.keys("s")
        terminal.wait_for("the stop confirmation", lambda t: "stop the run?" in t, 30)
        terminal.keys("y")
        text = terminal.wait_for(
            "a clean stop", lambda t: "nothing of it is left running" in t, 120
        )
        (record,) = store.records()
        assert record.state is RunState.STOPPED

        terminal.keys("q")
        terminal.wait_for("the shell after the console", lambda t: "launch this" not in t, 30)
    finally:
        asyncio.run(kill_live_runs(store))
