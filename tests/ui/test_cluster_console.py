"""The run screen at a large cluster's size (1,024 recorded ranks on 128 nodes, no network): a
row per node with the worst first, expanded and folded with enter, ``w`` to the worst node,
and the loss as bands across the ranks with the chosen rank's line on top."""

from __future__ import annotations

import asyncio
import json

from ddptui.run.following.updates import FileLine
from ddptui.ui.app import DdptuiApp
from ddptui.ui.messages import RunChanged
from ddptui.ui.screens.run import RunScreen
from ddptui.ui.widgets.loss_chart import LossChart
from ddptui.ui.widgets.rank_table import RANK_COLUMNS, RankTable
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


def test_a_node_row_scrolled_to_shows_the_node_s_latest_figures() -> None:
    asyncio.run(_test_a_node_row_scrolled_to_shows_the_node_s_latest_figures())


async def _test_a_node_row_scrolled_to_shows_the_node_s_latest_figures() -> None:
    screen = _cluster_screen()
    model = screen.run_model
    async with DdptuiApp(first_screen=screen).run_test(size=(160, 48)) as pilot:
        table = screen.query_one(RankTable)
        await until(pilot, "the node rows", lambda: table.row_count == 128, 20)
        # Nodes 1 and 127 step on; node 1's row is in view, node 127's far below it.
        for rank in (*range(8, 16), *range(1016, 1024)):
            host = model.record.nodes[rank // 8].host
            step = {"v": 1, "type": "step", "rank": rank, "node_rank": rank // 8, "step": 500}
            step |= {"local_rank": rank % 8, "world_size": 1024, "time": 1.0e9, "loss": 0.25}
            model.apply(FileLine(host, f"events/rank{rank}.jsonl", 0, json.dumps(step)))
        screen.post_message(RunChanged(model))
        await until(pilot, "node 1's new step", lambda: _step(table, "node1") == "500", 20)
        # Nothing more to draw: only the scroll itself can bring node 127's row up to date.
        await until(pilot, "the screen drawn", lambda: not screen.dirty, 20)
        assert _step(table, "node127") == "80"

        table.focus()
        await pilot.press("ctrl+end")
        await until(pilot, "node 127's new step", lambda: _step(table, "node127") == "500", 20)
        assert table.node_at(table.cursor_row) == 127


def _step(table: RankTable, key: str) -> str:
    return str(table.get_row(key)[RANK_COLUMNS.index("step")])


def _cluster_screen() -> RunScreen:
    model = scenes.cluster_model()
    return RunScreen(model.record, model=model)


def _labels(chart: LossChart) -> list[str]:
    return [str(label) for label in chart._labels]
