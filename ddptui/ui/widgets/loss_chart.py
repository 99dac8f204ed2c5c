"""The loss over steps (textual-plot's braille line plot), all ranks or one, linear or log.

Losses and steps are a host's numbers, and the plot divides by its axes' spans and takes
logarithms of them: the chart sets both axes itself (:func:`axis_limits`), draws a linear loss
beyond :data:`PLOT_LIMIT` at it, and leaves out what is no finite number (and, on the log
scale, what is not positive). Whatever a host sends, the picture is drawn.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from textual import on
from textual.theme import Theme
from textual_plot import HiResMode, NumericAxisFormatter, PlotWidget

from ddptui.run.following.bands import Band
from ddptui.run.following.progress import RankProgress

COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red", "white", "bright_black")
LIGHT_COLOURS = ("blue", "magenta", "green4", "dark_orange3", "cyan", "red", "black", "purple")
"""On a light background white and yellow vanish: the same number of lines in darker inks."""
MAX_LINES = len(COLOURS)
"""More lines than colours would be unreadable: beyond it the ranks are drawn as bands (their
lowest, median and highest loss at each step) with the selected rank's line on top, or where
there are no bands (losses read from output), the first ranks' lines."""
BAND_STYLE = "bright_black"
BUCKETS_PER_CELL = 4
"""Braille draws two dots across each terminal cell; two buckets per dot column keep the picture
when the buckets' edges and the plot's dot columns do not line up."""
PLOT_LIMIT = 1e300
"""A linear loss beyond ± this is drawn at it: the plot's arithmetic on the differences of
values near 1e308 overflows to infinity."""
RESOLUTION = 2e-6
"""An axis spans at least this share of its largest value, as the plot's own ±1e-6 around a
flat line does near 1: a fixed ±1e-6 is lost to rounding from 1e12 on (the span is then 0, and
the plot divides by it), and ticks closer than the values' precision would fall together."""
SMALLEST_SPAN = 1e-100
"""And at least this much: the plot takes the logarithm of a fifth of its span, and 5e-324
(a loss a host may send) less 0, divided by 5, is 0."""
SHORT_ROWS = 16
"""Below this height the chart gives its margins' rows to the plot."""
LABEL_CHARS = 9
"""The plot's left margin (10 cells) less one: it cuts longer labels (``-1000000000`` would read
``-10000000``)."""


def axis_limits(low: float, high: float) -> tuple[float, float]:
    """Limits for an axis over the values ``low`` to ``high`` (finite, and within ±1e307 so that
    their difference is): theirs, or around their middle as wide as :data:`RESOLUTION` and
    :data:`SMALLEST_SPAN` ask."""
    least = max(max(abs(low), abs(high)) * RESOLUTION, SMALLEST_SPAN)
    if high - low >= least:
        return low, high
    middle = low / 2 + high / 2
    return middle - least / 2, middle + least / 2


class TickLabels(NumericAxisFormatter):
    """The plot's labels, in two significant digits when one of them would not fit the margin
    (:data:`LABEL_CHARS`)."""

    def get_labels_for_ticks(self, ticks: Sequence[float]) -> list[str]:
        labels = super().get_labels_for_ticks(ticks)
        if all(len(label) <= LABEL_CHARS for label in labels):
            return labels
        return [f"{tick:.2g}" for tick in ticks]


class StepTicks(NumericAxisFormatter):
    """Steps ticked as far apart as their labels need: one, two or five times a power of ten,
    no more of them than fit side by side in :attr:`width` cells with a space between (the
    plot's own ticks ran together on a narrow chart: ``50100150200250300``)."""

    def __init__(self) -> None:
        super().__init__()
        self.width = 80
        """Of the plot area, in cells: the chart sets it as it draws."""

    def get_ticks(self, min_: float, max_: float, max_ticks: int = 8) -> list[float]:
        span = max_ - min_
        if not span > 0:
            return [min_]
        label = len(f"{max(abs(min_), abs(max_)):.0f}") + 1
        fitting = max(2, min(max_ticks, self.width // label))
        least = span / (fitting - 1)
        power = 10.0 ** math.floor(math.log10(least))
        interval = next(m * power for m in (1, 2, 5, 10) if m * power >= least)
        first = math.ceil(min_ / interval) * interval
        return [first + index * interval for index in range(int((max_ - first) // interval) + 1)]


def envelope(
    points: Iterable[tuple[int, float]], first: int, last: int, columns: int
) -> list[tuple[int, float]]:
    """At most two points per column of ``columns`` spanning steps ``first``–``last``: the
    lowest and the highest of the points that fall in it, in step order.

    A line of thousands of points drawn into a hundred dot columns looks the same, spikes
    included, but costs the plot a fraction of the time.
    """
    span = max(1, last - first)
    kept: list[tuple[int, float]] = []
    column = -1
    low = high = (0, 0.0)
    for point in points:
        at = (point[0] - first) * (columns - 1) // span
        if at != column:
            if column >= 0:
                kept.extend(_in_order(low, high))
            column, low, high = at, point, point
        elif point[1] < low[1]:
            low = point
        elif point[1] > high[1]:
            high = point
    if column >= 0:
        kept.extend(_in_order(low, high))
    return kept


def _in_order(low: tuple[int, float], high: tuple[int, float]) -> Sequence[tuple[int, float]]:
    if low is high:
        return (low,)
    return (low, high) if low[0] < high[0] else (high, low)


class LossChart(PlotWidget):
    """Redraws only when the points it shows changed."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        # Losses fall by orders of magnitude: on a linear axis the first steps flatten the rest.
        self.log_scale = True
        self._drawn: tuple[object, ...] = ()
        self._shown: tuple[list[RankProgress], int | None, Sequence[Band]] = ([], None, ())
        self._zoomed = False
        """Zoomed or panned by hand: the axes are left as the user set them until reset."""
        self.set_y_formatter(TickLabels())
        self._step_ticks = StepTicks()
        self.set_x_formatter(self._step_ticks)

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, theme: Theme) -> None:
        self.show(*self._shown)

    def on_resize(self) -> None:
        # A short chart (80×24) keeps its rows for the lines: one row for the axis label above,
        # one for the step ticks below (the ticks say what the axis is).
        short = self.size.height < SHORT_ROWS
        if (self.margin_top, self.margin_bottom) != (1, 1 if short else 3):
            self.margin_top, self.margin_bottom = 1, 1 if short else 3
            self.set_xlabel("" if short else "step")
            # Drawn again once the plot area has its new size.
            self.call_after_refresh(self._margins_changed)
        # The lines were thinned for the old width (before the first layout, for none).
        self.show(*self._shown)

    def _margins_changed(self) -> None:
        # A layout refresh is what makes the plot size its canvases again.
        self.refresh(layout=True)
        self._drawn = ()
        self.show(*self._shown)

    @on(PlotWidget.ScaleChanged)
    def _scaled_by_hand(self) -> None:
        self._zoomed = True

    def action_reset_scales(self) -> None:
        self._zoomed = False
        self._drawn = ()
        self.show(*self._shown)

    @property
    def drawn_log_scale(self) -> bool | None:
        """The scale of the picture on show (None before the first)."""
        return bool(self._drawn[0]) if self._drawn else None

    def show(self, ranks: list[RankProgress], only: int | None, bands: Sequence[Band] = ()) -> None:
        """Each rank's line (``only``: that rank's alone); with more ranks than
        :data:`MAX_LINES` and ``bands``, their lowest, median and highest loss at each step
        instead, ``only``'s line on top."""
        self._shown = (ranks, only, bands)
        banded = len(ranks) > MAX_LINES and bool(bands)
        if banded:
            shown = [rank for rank in ranks if rank.rank == only]
        else:
            shown = [rank for rank in ranks if only is None or rank.rank == only][:MAX_LINES]
        columns = max(16, self.size.width * BUCKETS_PER_CELL)
        # Last step of every line, the scale and the width: if none moved, the picture is the same.
        colours = COLOURS if self.app.current_theme.dark else LIGHT_COLOURS
        key = (
            self.log_scale,
            only,
            columns,
            colours,
            (len(bands), bands[-1]) if banded else None,
            *((r.rank, len(r.losses), r.step) for r in shown),
        )
        if key == self._drawn:
            return
        self._drawn = key
        self._step_ticks.width = max(1, self.size.width - self.margin_left - 2)
        self.clear()
        named: list[tuple[str, str, Iterable[tuple[int, float]]]] = []
        if banded:
            named += [
                ("highest", BAND_STYLE, ((band.step, band.high) for band in bands)),
                ("median", colours[0], ((band.step, band.median) for band in bands)),
                ("lowest", BAND_STYLE, ((band.step, band.low) for band in bands)),
            ]
        for index, rank in enumerate(shown):
            # On top of the bands, in the ink the median's is not.
            style = colours[3] if banded else colours[index % len(colours)]
            named.append((f"rank {rank.rank}", style, rank.losses))
        firsts_and_lasts = [
            step
            for rank in shown
            if rank.losses
            for step in (rank.losses[0][0], rank.losses[-1][0])
        ]
        if banded:
            firsts_and_lasts += [bands[0].step, bands[-1].step]
        first, last = min(firsts_and_lasts, default=0), max(firsts_and_lasts, default=0)
        lines = []
        for _, _, points in named:
            drawable = (
                point
                for point in points
                if math.isfinite(point[1]) and (point[1] > 0 or not self.log_scale)
            )
            # Thinned before the logarithm: it keeps each column's lowest and highest alike.
            thinned = envelope(drawable, first, last, columns)
            lines.append([(step, self._plotted(loss)) for step, loss in thinned])
        drawn = [point for points in lines for point in points]
        if drawn and not self._zoomed:
            all_steps, all_losses = zip(*drawn, strict=True)
            self.set_xlimits(*axis_limits(min(all_steps), max(all_steps)))
            self.set_ylimits(*axis_limits(min(all_losses), max(all_losses)))
        for (label, style, _), points in zip(named, lines, strict=True):
            if points:
                steps, losses = zip(*points, strict=True)
                self.plot(
                    steps,
                    losses,
                    line_style=style,
                    hires_mode=HiResMode.BRAILLE,
                    label=label,
                )
        # The plot writes its label over the last one without clearing it: same-width labels
        # leave nothing of the longer one behind ("log1lossss)").
        label = "log10(loss)" if self.log_scale else "loss"
        self.set_ylabel(label.center(len("log10(loss)")))

    def _plotted(self, loss: float) -> float:
        """A finite loss (positive on the log scale) as the chart draws it."""
        if self.log_scale:
            return math.log10(loss)
        return min(max(loss, -PLOT_LIMIT), PLOT_LIMIT)
