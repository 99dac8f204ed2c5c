"""The loss chart: its thinning of long loss histories (what it keeps is what a dot column can
show), and what it leaves on the terminal as it redraws."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st
from textual.app import App, ComposeResult
from textual_hires_canvas import Canvas

from ddptui.run.following.progress import RankProgress
from ddptui.ui.widgets.loss_chart import LossChart, envelope

losses = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
histories = st.lists(st.tuples(st.integers(0, 100_000), losses), max_size=3000).map(
    lambda points: sorted(dict(points).items())
)


@given(histories, st.integers(2, 400))
def test_each_column_keeps_its_lowest_and_highest_point_in_step_order(
    points: list[tuple[int, float]], columns: int
) -> None:
    first, last = (points[0][0], points[-1][0]) if points else (0, 0)
    kept = envelope(points, first, last, columns)

    assert len(kept) <= 2 * columns
    assert [step for step, _ in kept] == sorted({step for step, _ in kept})
    assert set(kept) <= set(points)

    def column_of(step: int) -> int:
        return (step - first) * (columns - 1) // max(1, last - first)

    by_column: dict[int, list[float]] = {}
    for step, loss in points:
        by_column.setdefault(column_of(step), []).append(loss)
    shown: dict[int, list[float]] = {}
    for step, loss in kept:
        shown.setdefault(column_of(step), []).append(loss)
    assert shown.keys() == by_column.keys()
    for column, values in by_column.items():
        assert min(shown[column]) == min(values) and max(shown[column]) == max(values)


def test_a_short_history_is_drawn_as_it_is() -> None:
    points = [(step, 1.0 / step) for step in range(1, 101)]
    assert envelope(points, 1, 100, 200) == points


def test_a_spike_survives_thinning() -> None:
    points = [(step, 1.0) for step in range(4096)]
    points[2021] = (2021, 50.0)
    kept = envelope(points, 0, 4095, 100)
    assert len(kept) < 200
    assert (2021, 50.0) in kept


def test_the_axis_label_leaves_nothing_of_the_last_one_behind() -> None:
    asyncio.run(_test_the_axis_label_leaves_nothing_of_the_last_one_behind())


class _ChartApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LossChart(id="loss")


async def _test_the_axis_label_leaves_nothing_of_the_last_one_behind() -> None:
    app = _ChartApp()
    rank = RankProgress(rank=0, node_rank=0, local_rank=0, host="h", step=20)
    rank.losses.extend((step, 1.0 / step) for step in range(1, 21))
    async with app.run_test(size=(100, 30)) as pilot:
        chart = app.query_one(LossChart)
        # What the terminal holds of the label row: the plot writes there without clearing.
        label_row = chart.query_one("#margin-top", Canvas)
        for log_scale, label in ((True, "log10(loss)"), (False, "loss"), (True, "log10(loss)")):
            chart.log_scale = log_scale
            chart.show([rank], None)
            await pilot.pause(0.1)
            assert "".join(label_row._buffer[0]).split() == [label]
