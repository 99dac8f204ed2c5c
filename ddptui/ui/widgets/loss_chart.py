"""The loss over steps (textual-plot's braille line plot), all ranks or one, linear or log."""

from __future__ import annotations

import math

from textual_plot import HiResMode, PlotWidget

from ddptui.run.progress import RankProgress

COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red", "white", "bright_black")
MAX_LINES = len(COLOURS)
"""More lines than colours would be unreadable: beyond it, only the first ranks are drawn."""


class LossChart(PlotWidget):
    """Redraws only when the points it shows changed."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        # Losses fall by orders of magnitude: on a linear axis the first steps flatten the rest.
        self.log_scale = True
        self._drawn: tuple[object, ...] = ()

    @property
    def drawn_log_scale(self) -> bool | None:
        """The scale of the picture on show (None before the first)."""
        return bool(self._drawn[0]) if self._drawn else None

    def show(self, ranks: list[RankProgress], only: int | None) -> None:
        shown = [rank for rank in ranks if only is None or rank.rank == only][:MAX_LINES]
        # Last step of every line and the scale: if none moved, the picture is the same.
        key = (self.log_scale, only, *((r.rank, len(r.losses), r.step) for r in shown))
        if key == self._drawn:
            return
        self._drawn = key
        self.clear()
        for index, rank in enumerate(shown):
            points = [(step, loss) for step, loss in rank.losses if math.isfinite(loss)]
            if self.log_scale:
                points = [(step, math.log10(loss)) for step, loss in points if loss > 0]
            if points:
                steps, losses = zip(*points, strict=True)
                self.plot(
                    steps,
                    losses,
                    line_style=COLOURS[index % len(COLOURS)],
                    hires_mode=HiResMode.BRAILLE,
                    label=f"rank {rank.rank}",
                )
        self.set_xlabel("step")
        self.set_ylabel("log10(loss)" if self.log_scale else "loss")
