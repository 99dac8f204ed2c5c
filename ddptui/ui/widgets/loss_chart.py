"""The loss over steps (textual-plot's braille line plot), all ranks or one, linear or log."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from textual.theme import Theme
from textual_plot import HiResMode, PlotWidget

from ddptui.run.progress import RankProgress

COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red", "white", "bright_black")
LIGHT_COLOURS = ("blue", "magenta", "green4", "dark_orange3", "cyan", "red", "black", "purple")
"""On a light background white and yellow vanish: the same number of lines in darker inks."""
MAX_LINES = len(COLOURS)
"""More lines than colours would be unreadable: beyond it, only the first ranks are drawn."""
BUCKETS_PER_CELL = 4
"""Braille draws two dots across each terminal cell; two buckets per dot column keep the picture
when the buckets' edges and the plot's dot columns do not line up."""


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
        self._shown: tuple[list[RankProgress], int | None] = ([], None)

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, theme: Theme) -> None:
        self.show(*self._shown)

    def on_resize(self) -> None:
        # The lines were thinned for the old width (before the first layout, for none).
        self.show(*self._shown)

    @property
    def drawn_log_scale(self) -> bool | None:
        """The scale of the picture on show (None before the first)."""
        return bool(self._drawn[0]) if self._drawn else None

    def show(self, ranks: list[RankProgress], only: int | None) -> None:
        self._shown = (ranks, only)
        shown = [rank for rank in ranks if only is None or rank.rank == only][:MAX_LINES]
        columns = max(16, self.size.width * BUCKETS_PER_CELL)
        # Last step of every line, the scale and the width: if none moved, the picture is the same.
        colours = COLOURS if self.app.current_theme.dark else LIGHT_COLOURS
        key = (
            self.log_scale,
            only,
            columns,
            colours,
            *((r.rank, len(r.losses), r.step) for r in shown),
        )
        if key == self._drawn:
            return
        self._drawn = key
        self.clear()
        steps_shown = [rank.losses[index][0] for rank in shown if rank.losses for index in (0, -1)]
        first, last = min(steps_shown, default=0), max(steps_shown, default=0)
        for index, rank in enumerate(shown):
            drawable = (
                point
                for point in rank.losses
                if math.isfinite(point[1]) and (point[1] > 0 or not self.log_scale)
            )
            # Thinned before the logarithm: it keeps each column's lowest and highest alike.
            points = envelope(drawable, first, last, columns)
            if self.log_scale:
                points = [(step, math.log10(loss)) for step, loss in points]
            if points:
                steps, losses = zip(*points, strict=True)
                self.plot(
                    steps,
                    losses,
                    line_style=colours[index % len(colours)],
                    hires_mode=HiResMode.BRAILLE,
                    label=f"rank {rank.rank}",
                )
        self.set_xlabel("step")
        self.set_ylabel("log10(loss)" if self.log_scale else "loss")
