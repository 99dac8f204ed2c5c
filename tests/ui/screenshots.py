"""Write the README's console screenshots (SVG) from the recorded H200 data:
``python -m tests.ui.screenshots``."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.screen import Screen

from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.health import HealthScreen
from ddptui.ui.screens.run import RunScreen
from tests.ui import scenes

DOCS = Path(__file__).resolve().parents[2] / "docs"
SIZE = (120, 36)


async def _save(screen: Screen[None], name: str, keys: tuple[str, ...] = ()) -> None:
    app = DdptuiApp(first_screen=screen)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*keys)
        await pilot.pause(0.3)
        app.save_screenshot(name, path=str(DOCS))


async def main() -> None:
    report = scenes.health_report()
    await _save(HealthScreen(report.config, report), "console-health.svg", ("down",))
    watch = scenes.run_watch()
    await _save(RunScreen(watch.record, watch=watch, follow=False), "console-run.svg")


if __name__ == "__main__":
    asyncio.run(main())
