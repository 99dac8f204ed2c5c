"""Write the docs' console screenshots (SVG): ``python -m tests.ui.screenshots``, at 160×48
and at 80×24.

The health and run screens come from the recorded H200 data (the run at 1,024 ranks too, each
rank replaying it); the demo's run screen from a real
``ddptui demo`` cluster on this machine (two loopback hosts, gloo), launched with ``l`` and
caught once every rank has logged a few dozen steps.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from textual.screen import Screen

from ddptui.demo.cluster import demo_cluster
from ddptui.run.store import RunStore
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.health import HealthScreen
from ddptui.ui.screens.run import RunScreen
from tests.ui import scenes
from tests.ui.pilot import kill_live_runs, launch_from_health

DOCS = Path(__file__).resolve().parents[2] / "docs"
SIZE = (160, 48)
SMALL = (80, 24)
"""The size the docs promise the console reads well at."""
DEMO_STEPS = 60


async def _save(
    screen: Screen[None], name: str, keys: tuple[str, ...] = (), size: tuple[int, int] = SIZE
) -> None:
    app = DdptuiApp(first_screen=screen)
    async with app.run_test(size=size) as pilot:
        await pilot.press(*keys)
        await pilot.pause(0.3)
        app.save_screenshot(name, path=str(DOCS))


async def _save_demo(name: str) -> None:
    with tempfile.TemporaryDirectory() as state, demo_cluster(2, 2) as cluster:
        store = RunStore(Path(state) / "runs")
        app = DdptuiApp(cluster.hosts_file, store=store, demo_note="demo")
        try:
            async with app.run_test(size=SIZE) as pilot:
                await launch_from_health(pilot, DEMO_STEPS, 180)
                await pilot.pause(0.6)
                app.save_screenshot(name, path=str(DOCS))
        finally:
            await kill_live_runs(store)


async def main() -> None:
    report = scenes.health_report()
    for size, suffix in ((SIZE, ""), (SMALL, "-80x24")):
        await _save(
            HealthScreen(report.config, report), f"console-health{suffix}.svg", ("down",), size
        )
        model = scenes.run_model()
        await _save(RunScreen(model.record, model=model), f"console-run{suffix}.svg", size=size)
    cluster = scenes.cluster_model()
    await _save(RunScreen(cluster.record, model=cluster), "console-run-1024.svg", ("w",))
    await _save_demo("demo-run.svg")


if __name__ == "__main__":
    asyncio.run(main())
