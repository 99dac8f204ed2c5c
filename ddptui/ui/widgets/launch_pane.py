"""The run screen's launch pane (``t``): the attempt's launch timeline, a bar row a host on one
time scale, the slowest host highlighted (:func:`ddptui.present.timeline.bars`)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddptui.present.timeline import bars
from ddptui.run.timeline import Timeline


class LaunchPane(VerticalScroll):
    """Scrolls the timeline's text (the ``Static`` ``#launch-text``)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._shown: Text | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="launch-text")

    def show(self, timeline: Timeline | None, hosts: Sequence[str], attempt: int) -> None:
        if timeline is None:
            text = Text(f"attempt {attempt} has no launch timeline (ddptui older than it)", "dim")
        else:
            text = Text("\n").join(bars(timeline, hosts, max(40, self.size.width - 2)))
        # An update lays the whole screen out again: only a change is worth one.
        if text != self._shown:
            self._shown = text
            self.query_one("#launch-text", Static).update(text)
