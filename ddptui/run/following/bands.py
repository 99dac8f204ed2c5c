"""The loss across ranks, step by step: the lowest, the median and the highest of the ranks'
losses at each step (pure).

A chart of 1,024 ranks cannot draw 1,024 lines, nor gather them twice a second (a million
points); the bands are kept as the steps come instead. A step's losses wait until every rank
has said its own, or until the newest step is :data:`LAG_STEPS` ahead (a rank that lags or has
gone is not waited for); then the step is three numbers. Like each rank's own curve, the bands
keep :data:`BAND_POINTS` steps at most: when full, every other one goes and a step is kept only
as far from the last as the points left are apart, so the whole run stays in view in fixed
memory.
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Final, NamedTuple, TypeVar

_Point = TypeVar("_Point")
BAND_POINTS: Final = 1024
LAG_STEPS: Final = 32
"""Steps the newest may be ahead of one whose losses are not all in, before that one is
closed with those it has."""


class Band(NamedTuple):
    step: int
    low: float
    median: float
    high: float
    ranks: int
    """How many ranks' losses it holds."""


class LossBands:
    """Each step's band over the ranks' losses, in step order."""

    def __init__(self) -> None:
        self.bands: deque[Band] = deque(maxlen=BAND_POINTS)
        self._open: dict[int, list[float]] = {}
        self._newest = -1
        self._closed = -1
        """The newest step closed (kept or thinned away)."""
        self._stride = 1

    def add(self, step: int, loss: float, ranks: int) -> None:
        """Rank's ``loss`` at ``step`` (finite), of ``ranks`` ranks in all."""
        if step <= self._closed:
            return  # closed already: a late rank's loss changes nothing that is drawn
        losses = self._open.setdefault(step, [])
        losses.append(loss)
        if step > self._newest:
            self._newest = step
            for late in [s for s in self._open if s <= step - LAG_STEPS]:
                self._close(late)
        if len(losses) >= ranks:
            for earlier in sorted(s for s in self._open if s <= step):
                self._close(earlier)

    def rewind(self, step: int) -> None:
        """A new attempt starts after ``step``: the steps after it will be taken again."""
        kept = [band for band in self.bands if band.step <= step]
        self.bands.clear()
        self.bands.extend(kept)
        self._open = {s: losses for s, losses in self._open.items() if s <= step}
        self._newest = max(self._open, default=step)
        self._closed = min(self._closed, step)

    def points(self) -> list[Band]:
        """The closed bands and, after them, the steps still open as they stand."""
        shown = list(self.bands)
        last = shown[-1].step if shown else -1
        shown.extend(_band(step, self._open[step]) for step in sorted(self._open) if step > last)
        return shown

    def _close(self, step: int) -> None:
        losses = self._open.pop(step)
        self._closed = max(self._closed, step)
        if self.bands and step - self.bands[-1].step < self._stride:
            return
        if halved_when_full(self.bands):
            self._stride *= 2
        self.bands.append(_band(step, losses))


def halved_when_full(points: deque[_Point]) -> bool:
    """Every other point of ``points`` kept when it is full, and whether it was: the curve goes
    on at half the resolution, the whole run in view in fixed memory, however long it is."""
    if len(points) != points.maxlen:
        return False
    kept = list(points)[::2]
    points.clear()
    points.extend(kept)
    return True


def _band(step: int, losses: list[float]) -> Band:
    return Band(step, min(losses), statistics.median(losses), max(losses), len(losses))
