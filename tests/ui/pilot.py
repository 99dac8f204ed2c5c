"""Waiting in pilot tests for what real hosts take their time over."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.pilot import Pilot


async def until(pilot: Pilot[int], what: str, ready: Callable[[], bool], timeout: float) -> None:
    """Let the app run until ``ready()``, failing with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        await pilot.pause(0.25)
