"""A host's extreme numbers on the console: every pane shows them, or a "?", and none crashes.

Fed as a host sends them: nvidia-smi's printed values through the follower's sample parsing,
step events' losses through the event reader; then the keys that show each pane, and the loss
chart on both scales.
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widgets import Static
from textual_plot.plot_widget import map_coordinate_to_hires_pixel

from ddptui.run.following.model import RunModel
from ddptui.run.following.progress import RankProgress
from ddptui.run.following.sample import sample_of
from ddptui.run.following.updates import FileLine, Heartbeat
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.run import RunScreen
from ddptui.ui.widgets.cells import bar, figure, number, percent, share
from ddptui.ui.widgets.loss_chart import (
    LABEL_CHARS,
    PLOT_LIMIT,
    LossChart,
    TickLabels,
    axis_limits,
)
from tests.ui import scenes

LARGEST = "1.7976931348623157e308"
HOSTILE_GPUS = [
    {
        "index": "0",
        "memory.used": "1e308",
        "memory.total": "1e-300",
        "utilization.gpu": "1e308",
        "temperature.gpu": "-1e308",
        "power.draw": LARGEST,
    },
    {
        "index": "1",
        "memory.used": "-1e308",
        "memory.total": "5e-324",
        "utilization.gpu": "-1e308",
        "temperature.gpu": "5e-324",
        "power.draw": "-" + LARGEST,
        "throttle_reasons": "-64",
        "reset_pending": "2",
        "nvlinks_down": "1e308",
        "ecc.errors.uncorrected.volatile.total": "-1",
    },
    {"index": "1e308", "memory.used": "5e-324", "memory.total": "1e308", "utilization.gpu": "50"},
]
"""As the agent's heartbeat carries nvidia-smi's printed values: no NaN, nothing infinite."""
HOSTILE_LOSSES = (1e308, -1e308, 5e-324, -5e-324, float(LARGEST), 2.5)


def _hostile_watch() -> RunModel:
    """The recorded run (rank 0 failed), then every GPU sample and rank 1's losses extreme."""
    model = scenes.run_model(failed=True)
    sample = sample_of(
        {"procs": 3, "cpu_pct": float(LARGEST), "rss_mib": 1e308, "gpus": HOSTILE_GPUS}
    )
    for beat in range(3):
        for host in ("gpu-a", "gpu-b"):
            model.apply(Heartbeat(host, scenes.CREATED + 300 + beat, {1: True}, sample))
    for offset, loss in enumerate(HOSTILE_LOSSES, start=1):
        event = {
            "v": 1,
            "type": "step",
            "rank": 1,
            "local_rank": 1,
            "node_rank": 0,
            "world_size": 4,
            "time": scenes.CREATED + 400 + offset,
            "epoch": 0,
            "step": 300 + offset,
            "loss": loss,
        }
        model.apply(FileLine("gpu-a", "events/rank1.jsonl", 0, json.dumps(event)))
    return model


def test_the_run_screen_survives_extreme_numbers_on_every_pane_and_scale() -> None:
    asyncio.run(_test_the_run_screen_survives_extreme_numbers_on_every_pane_and_scale())


async def _test_the_run_screen_survives_extreme_numbers_on_every_pane_and_scale() -> None:
    model = _hostile_watch()
    rank = next(rank for rank in model.progress.ranks if rank.rank == 1)
    # The event reader lets them through: they are what the chart has to draw.
    assert set(HOSTILE_LOSSES) <= {loss for _, loss in rank.losses}
    screen = RunScreen(model.record, model=model)
    app = DdptuiApp(first_screen=screen)
    async with app.run_test(size=(140, 44)) as pilot:
        chart = screen.query_one(LossChart)
        scales = []
        for key in ("g", "y", "e", "y", "o", "g", "y"):
            await pilot.press(key)
            await pilot.pause(0.3)
            assert app.is_running and app.screen is screen
            # Every widget on show drawn now, the chart with its axes.
            app.export_screenshot()
            scales.append(chart.drawn_log_scale)
            assert math.isfinite(chart._y_min) and math.isfinite(chart._y_max)
            if chart.drawn_log_scale is False:
                # -1e308 and 1.8e308 are drawn at the limit of the linear scale.
                assert (chart._y_min, chart._y_max) == (-PLOT_LIMIT, PLOT_LIMIT)
        assert scales == [True, False, False, True, True, True, False]
        gpus = screen.query_one("#gpus-text", Static).content
    assert isinstance(gpus, Text)
    lines = gpus.plain.splitlines()
    assert (
        lines[1]
        == "  GPU 0 ██████████ 100% 1e+308/0 MiB  100%  -1e+308°C  1.8e+308 W  util █  mem █"
    )
    assert lines[2] == "  GPU 1 ░░░░░░░░░░   0% -1e+308/0 MiB  0%  0°C  -1.8e+308 W  util ▁  mem ▁"
    assert lines[3] == "  GPU ? ░░░░░░░░░░   0% 0/1e+308 MiB  50%"
    assert "cpu 1.8e+308%  rss 1e+308 MiB" in lines[0]


# --- the chart alone: axes a host's steps and losses can give --------------------------------


class ChartApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LossChart(id="loss")


def _rank(points: list[tuple[int, float]]) -> RankProgress:
    rank = RankProgress(rank=0, node_rank=0, local_rank=0, host="h", step=points[-1][0])
    rank.losses.extend(points)
    return rank


@pytest.mark.parametrize(
    "points",
    [
        [(2**63 - 2, 1.0), (2**63 - 1, 2.0)],
        [(step, 1e12) for step in range(1, 20)],
        [(step, 5e-324 * (step % 2)) for step in range(1, 20)],
        [(1, 5e-324), (2, -5e-324)],
        [(1, 1e308), (2, -1e308), (3, 5e-324), (4, 1e308)],
        [(5, 3.0)],
    ],
    ids=["steps-near-2**63", "flat-1e12", "subnormal", "subnormals-both-signs", "1e308", "one"],
)
def test_the_chart_draws_any_finite_losses_on_both_scales(points: list[tuple[int, float]]) -> None:
    asyncio.run(_test_the_chart_draws_any_finite_losses_on_both_scales(points))


async def _test_the_chart_draws_any_finite_losses_on_both_scales(
    points: list[tuple[int, float]],
) -> None:
    app = ChartApp()
    async with app.run_test(size=(100, 30)) as pilot:
        chart = app.query_one(LossChart)
        for log_scale in (True, False, True):
            chart.log_scale = log_scale
            chart.show([_rank(points)], None)
            await pilot.pause(0.1)
            app.export_screenshot()
            assert app.is_running
            assert chart._x_min < chart._x_max and chart._y_min < chart._y_max


# --- the helpers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "spec", "shown"),
    [
        (1e308, ".0f", "1e+308"),
        (-float(LARGEST), ".0f", "-1.8e+308"),
        (5e-324, ".4g", "4.941e-324"),
        (2**63 - 1, "d", "9.22e+18"),
        (10**400, "d", "?"),
        (math.nan, ".0f", "?"),
        (-math.inf, ".1f", "?"),
        (42, "d", "42"),
        (0.5, ".3f", "0.500"),
        (123456789012.0, ".0f", "123456789012"),
    ],
)
def test_a_figure_is_short_or_a_question_mark(value: float, spec: str, shown: str) -> None:
    assert figure(value, spec) == shown


def test_a_number_cell_keeps_its_suffix_and_its_dash() -> None:
    assert number(1e308, ".0f", " MiB").plain == "1e+308 MiB"
    assert number(None, ".0f").plain == "–"


@pytest.mark.parametrize(
    ("part", "whole", "fraction"),
    [
        (1e308, 1e-300, 1.0),
        (float(LARGEST), 5e-324, 1.0),
        (5e-324, 1e308, 0.0),
        (-1e308, 1e308, 0.0),
        (50, 200, 0.25),
        (1, 0, None),
        (1, -1e-300, None),
        (math.nan, 1, None),
        (1, math.inf, None),
        (10**400, 1, None),
    ],
)
def test_a_share_is_from_0_to_1_or_none(part: float, whole: float, fraction: float | None) -> None:
    assert share(part, whole) == fraction


def test_percentages_are_clamped_or_refused() -> None:
    assert [percent(value) for value in (1e308, -1e308, 5e-324, 50.5)] == [100, 0, 5e-324, 50.5]
    assert percent(math.nan) is None and percent(math.inf) is None


def test_a_bar_without_a_share_says_so() -> None:
    assert bar(1e308, 1e-300, width=4).plain == "████ 100%"
    assert bar(1, 0, width=4).plain == "░░░░   ?%"


finite_values = st.floats(min_value=-PLOT_LIMIT, max_value=PLOT_LIMIT, allow_nan=False)


@given(finite_values, finite_values)
def test_axis_limits_are_ones_the_plot_can_divide_by_and_mark(a: float, b: float) -> None:
    low, high = sorted((a, b))
    start, end = axis_limits(low, high)
    assert math.isfinite(start) and math.isfinite(end)
    assert start <= low and high <= end and start < end
    # What the plot does with them: its pixels, and its ticks and their labels.
    region = Region(0, 0, 200, 60)
    for value in (low, high):
        x, y = map_coordinate_to_hires_pixel(value, value, start, end, start, end, region)
        assert math.isfinite(x) and math.isfinite(y)
    ticks, labels = TickLabels().get_ticks_and_labels(start, end)
    assert ticks == sorted(set(ticks))
    assert all(len(label) <= LABEL_CHARS for label in labels)


def test_a_zoom_by_hand_is_kept_as_losses_arrive_until_reset() -> None:
    asyncio.run(_test_a_zoom_by_hand_is_kept_as_losses_arrive_until_reset())


async def _test_a_zoom_by_hand_is_kept_as_losses_arrive_until_reset() -> None:
    app = ChartApp()
    async with app.run_test(size=(100, 30)) as pilot:
        chart = app.query_one(LossChart)
        chart.show([_rank([(step, 1 / step) for step in range(1, 50)])], None)
        chart.focus()
        await pilot.press("plus")
        zoomed = (chart._x_min, chart._x_max)
        assert 1 < zoomed[0] < zoomed[1] < 49
        chart.show([_rank([(step, 1 / step) for step in range(1, 60)])], None)
        await pilot.pause(0.1)
        assert (chart._x_min, chart._x_max) == zoomed
        await pilot.press("r")
        assert (chart._x_min, chart._x_max) == (1, 59)
