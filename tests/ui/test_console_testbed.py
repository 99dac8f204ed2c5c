"""The console's keys against real hosts: the test bed's sshd hosts, real torchrun with gloo.

Launch from the health screen, watch losses arrive, stop, resume, quit with the run left
going, attach again from the runs screen, kill. Each step is judged by what the run store and
the screens hold, and the run is killed at the end whatever happened.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable

from ddptui.run.record import RunState
from ddptui.run.store import RunStore
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.confirm import ConfirmScreen
from ddptui.ui.screens.health import HealthScreen
from ddptui.ui.screens.run import RunScreen
from ddptui.ui.screens.runs import RunsScreen
from tests.run.bed import SMALL
from tests.testbed import TestBed
from tests.ui.pilot import kill_live_runs, open_from_runs, until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ENDLESS = [*SMALL, "--max-steps", "100000"]
"""The test bed's paced small model, until it is stopped."""


def _steps(screen: RunScreen) -> list[int]:
    return [rank.step or 0 for rank in screen.run_model.progress.ranks]


def _loss_cells(screen: RunScreen) -> list[str]:
    table = screen.query_one("#ranks", DataTable)
    return [str(table.get_row_at(row)[3]) for row in range(table.row_count)]


async def _confirm(pilot: Pilot[int], key: str, expect: str, *typed: str) -> None:
    """``key``, its confirmation showing ``expect``, then yes; with ``typed``, that text in its
    field (``a``) and enter."""
    app = pilot.app
    await pilot.press(key)
    await until(
        pilot, f"the {key!r} confirmation", lambda: isinstance(app.screen, ConfirmScreen), 60
    )
    assert isinstance(app.screen, ConfirmScreen)
    assert expect in app.screen.body.plain, app.screen.body.plain
    if typed:
        await pilot.press("a", *typed, "enter")
    else:
        await pilot.press("y")


def test_launch_watch_stop_resume_quit_attach_kill(testbed: TestBed, tmp_path: Path) -> None:
    hosts_file = testbed.write_hosts_file(
        tmp_path / "hosts.toml", testbed.hosts[:2], job={"nproc_per_node": 1, "args": ENDLESS}
    )
    # Where the command line keeps runs too: the CLI takes part below.
    store = RunStore(tmp_path / "state" / "ddptui" / "runs")
    try:
        asyncio.run(_drive(hosts_file, store))
    finally:
        asyncio.run(kill_live_runs(store))


async def _drive(hosts_file: Path, store: RunStore) -> None:
    app = DdptuiApp(hosts_file, store=store)
    async with app.run_test(size=(160, 48)) as pilot:
        health = app.screen
        assert isinstance(health, HealthScreen)
        await until(pilot, "the check", lambda: health.report is not None, 120)
        assert health.report is not None and health.report.healthy
        hosts = health.query_one("#hosts", DataTable)
        assert [str(hosts.get_row_at(row)[2]) for row in range(2)] == ["ok", "ok"]

        # l: the confirmation shows the plan; extra arguments typed in its field go after
        # [job] args; enter launches; the run screen follows.
        await _confirm(pilot, "l", "2 host(s), 2 ranks, backend gloo", *"--seed 7")
        await until(pilot, "the run screen", lambda: isinstance(app.screen, RunScreen), 120)
        run = app.screen
        assert isinstance(run, RunScreen)
        assert run.record.args[-2:] == ["--seed", "7"], run.record.args
        await until(pilot, "steps on every rank", lambda: min(_steps(run)) >= 5, 180)
        # The table shows them at its next refresh (twice a second).
        await until(
            pilot,
            "losses in the table",
            lambda: all(cell[0].isdigit() for cell in _loss_cells(run)),
            5,
        )

        # s: asks, then stops gracefully; the supervisor sees it end as stopped.
        await _confirm(pilot, "s", "checkpoint")
        await until(pilot, "the stop", lambda: run.record.state is RunState.STOPPED, 120)
        await until(pilot, "the follower to end", lambda: not run.following, 60)
        stopped_at = max(_steps(run))

        # r: a second attempt that carries on from the checkpoint; it shows as attempt 2
        # starting, not as the stopped attempt 1.
        await pilot.press("r")
        await until(pilot, "attempt 2", lambda: run.run_model.attempt == 2, 120)
        assert run.judgement.attempt == 2
        states = {rank.state.value for rank in run.run_model.progress.ranks}
        assert states <= {"starting", "running"}, states
        await until(pilot, "steps of attempt 2", lambda: min(_steps(run)) > stopped_at, 180)
        assert store.load(run.record.id).state is RunState.RUNNING
        run_id = run.record.id

        # q: the console closes; the run goes on and the console says how to come back.
        await pilot.press("q")
    assert app.goodbye is not None and f"ddptui status {run_id}" in app.goodbye
    assert store.load(run_id).state is RunState.RUNNING

    # Attach again: R lists the run, enter follows it. The command line kills it meanwhile:
    # the console sees it; its own K then only makes sure nothing is left, and says so.
    again = DdptuiApp(hosts_file, store=store)
    async with again.run_test(size=(160, 48)) as pilot:
        attached = await open_from_runs(pilot, run_id)
        await until(pilot, "attempt 2's steps", lambda: max(_steps(attached)) > 0, 120)
        assert attached.following
        environment = {**os.environ, "XDG_STATE_HOME": str(store.root.parents[1])}
        command = [sys.executable, "-m", "ddptui", "stop", run_id, "--kill"]
        killed = await asyncio.to_thread(
            subprocess.run, command, env=environment, capture_output=True, text=True
        )
        assert killed.returncode == 0, killed.stderr
        await until(pilot, "the kill", lambda: attached.record.state is RunState.STOPPED, 60)
        assert attached.judgement.state is RunState.STOPPED
        killed_at = max(_steps(attached))
        await _confirm(pilot, "K", "no checkpoint")
        await until(pilot, "the answer", lambda: "stays stopped" in attached.note, 60)
        assert "nothing of it is left running" in attached.note

        # A finished run opens from the runs screen too: its files read back from the hosts.
        await pilot.press("escape")
        assert isinstance(again.screen, RunsScreen)
        await pilot.press("f5", "enter")
        finished = again.screen
        assert isinstance(finished, RunScreen) and finished is not attached
        await until(pilot, "the read-back", lambda: max(_steps(finished)) >= killed_at, 60)
        assert not finished.following
    assert stopped_at > 0
