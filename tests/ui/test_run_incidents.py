"""The run screen's word on recovery: the latest incident under the run's state, as
``ddptui status`` words each (the screen keeps to the latest: status lists them all)."""

from __future__ import annotations

import asyncio

from rich.text import Text
from textual.widgets import Static

from ddptui.run.record import Incident
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.run import RunScreen
from tests.ui import scenes


def test_the_run_screen_says_the_latest_incident_under_the_run_s_state() -> None:
    model = scenes.run_model(failed=False)
    record = model.record
    record.incidents = [
        Incident(1, 1, scenes.CREATED + 60, "rank 1 on gpu-b was killed", ("gpu-b",), "killed"),
        Incident(
            2,
            2,
            scenes.CREATED + 120,
            "torchrun on gpu-c exited 1",
            ("gpu-c",),
            "rank 2 on gpu-c failed first: killed_by_signal",
            action="resuming on gpu-e in place of gpu-c",
        ),
    ]

    async def shown() -> str:
        screen = RunScreen(record, model=model)
        async with DdptuiApp(first_screen=screen).run_test(size=(160, 44)) as pilot:
            await pilot.pause(0.3)
            status = screen.query_one("#run-status", Static).content
            assert isinstance(status, Text)
            return status.plain

    text = asyncio.run(shown())
    assert "incident 2 at " in text and "resuming on gpu-e in place of gpu-c" in text, text
    assert "incident 1 " not in text
