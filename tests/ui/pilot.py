"""Waiting in pilot tests for what real hosts take their time over, and cleaning up after."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.pilot import Pilot

from ddptui.run.control import RunControl
from ddptui.run.store import RunStore
from ddptui.ui.screens.confirm import ConfirmScreen
from ddptui.ui.screens.health import HealthScreen
from ddptui.ui.screens.run import RunScreen
from ddptui.ui.screens.runs import RunsScreen


async def until(pilot: Pilot[int], what: str, ready: Callable[[], bool], timeout: float) -> None:
    """Let the app run until ``ready()``, failing with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        await pilot.pause(0.25)


async def open_from_runs(pilot: Pilot[int], run_id: str) -> RunScreen:
    """``R``, then enter on the latest run (``run_id``): its run screen."""
    app = pilot.app
    await pilot.press("R")
    assert isinstance(app.screen, RunsScreen)
    await pilot.press("enter")
    await until(pilot, "the run screen", lambda: isinstance(app.screen, RunScreen), 60)
    screen = app.screen
    assert isinstance(screen, RunScreen) and screen.record.id == run_id
    return screen


async def launch_from_health(pilot: Pilot[int], steps: int, timeout: float) -> RunScreen:
    """From the health screen, once the check is done: ``l``, ``y``, and the run screen once
    every rank has logged ``steps`` steps."""
    app = pilot.app
    health = app.screen
    assert isinstance(health, HealthScreen)
    await until(pilot, "the check", lambda: health.report is not None, timeout)
    await pilot.press("l")
    await until(pilot, "the plan", lambda: isinstance(app.screen, ConfirmScreen), 60)
    await pilot.press("y")
    await until(pilot, "the run screen", lambda: isinstance(app.screen, RunScreen), timeout)
    run = app.screen
    assert isinstance(run, RunScreen)
    await until(
        pilot,
        f"{steps} steps on every rank",
        lambda: min(rank.step or 0 for rank in run.run_model.progress.ranks) >= steps,
        timeout,
    )
    return run


async def kill_live_runs(store: RunStore) -> None:
    """Kill every run of ``store`` that still goes on, whatever a test left behind."""
    control = RunControl(store)
    for record in control.catalogue().records:
        if not record.state.final:
            await control.stop(record.id, kill=True)
