"""The run screen at a large cluster's size (1,024 recorded ranks on 128 nodes, no network): a
row per node with the worst first, expanded and folded with enter, ``w`` to the worst node,
and the loss as bands across the ranks with the chosen rank's line on top."""

from __future__ import annotations

import asyncio

from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.run import RunScreen
from ddptui.ui.widgets.loss_chart import LossChart
from ddptui.ui.widgets.rank_table import RankTable
from tests.ui import scenes
from tests.ui.pilot import until


def test_a_node_row_expands_into_its_ranks_and_w_goes_to_the_worst() -> None:
    asyncio.run(_test_a_node_row_expands_into_its_ranks_and_w_goes_to_the_worst())


async def _test_a_node_row_expands_into_its_ranks_and_w_goes_to_the_worst() -> None:
    screen = _cluster_screen()
    async with DdptuiApp(first_screen=screen).run_test(size=(160, 48)) as pilot:
        table = screen.query_one(RankTable)
        await until(pilot, "the node rows", lambda: table.row_count == 128, 20)
        # The failed rank's node, then the node of the rank whose loss is no number.
        assert [table.node_at(row) for row in range(3)] == [5, 76, 0]
        assert table.rank_at(0) is None
        table.focus()
        await pilot.press("down", "down", "enter")
        await until(pilot, "node 0's ranks", lambda: table.row_count == 136, 20)
        assert [table.rank_at(row) for row in range(3, 11)] == list(range(8))
        await pilot.press("enter")
        await until(pilot, "node 0 folded", lambda: table.row_count == 128, 20)

        await pilot.press("w")
        await until(pilot, "node 5's ranks", lambda: table.row_count == 136, 20)
        assert table.cursor_row == 0 and table.node_at(0) == 5
        assert screen.note == "worst: node 5 gpu-005: 1 failed, 7 running"
        await pilot.press("down", "down", "down", "enter")
        assert screen.chart_rank == 42 and screen.log_rank == 42


def test_the_chart_draws_the_ranks_as_bands_with_the_chosen_rank_on_top() -> None:
    asyncio.run(_test_the_chart_draws_the_ranks_as_bands_with_the_chosen_rank_on_top())


async def _test_the_chart_draws_the_ranks_as_bands_with_the_chosen_rank_on_top() -> None:
    screen = _cluster_screen()
    async with DdptuiApp(first_screen=screen).run_test(size=(160, 48)) as pilot:
        chart = screen.query_one(LossChart)
        bands = screen.run_model.bands.points()
        # Every step closed across all 1,024 ranks but rank 42's last ones (failed at 60).
        assert [band.step for band in bands] == list(range(2, 82, 2))
        assert {band.ranks for band in bands if band.step <= 48} == {1024}
        assert bands[-1].ranks == 1022  # no rank 42, no rank 613 (no number)
        await until(
            pilot, "the bands", lambda: _labels(chart) == ["highest", "median", "lowest"], 20
        )
        screen.chart_rank = 42
        screen.action_worst()
        await until(pilot, "rank 42 on top", lambda: _labels(chart)[-1:] == ["rank 42"], 20)


def _cluster_screen() -> RunScreen:
    model = scenes.cluster_model()
    return RunScreen(model.record, model=model)


def _labels(chart: LossChart) -> list[str]:
    return [str(label) for label in chart._labels]
