"""The run screen's table of ranks: a DataTable whose render caches fit what it shows."""

from __future__ import annotations

from typing import Any

from textual import events
from textual.message import Message
from textual.widgets import DataTable

CELL_RENDERS = 1024
"""Rendered cells kept: the visible rows' cells twice over. DataTable keeps 10,000 by default,
which for a table whose every cell changes twice a second only holds stale renders: tens of
thousands of objects that each full garbage collection walks (pauses of ~100 ms) and memory
that keeps growing for minutes."""
ROW_RENDERS = 128
LINES = 256


class RankTable(DataTable[Any]):
    class Resized(Message):
        """The table's size changed: which columns fit whole may have too."""

    def on_resize(self, event: events.Resize) -> None:
        self.post_message(self.Resized())

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Textual's own caches, sized down; a Textual without them renders the same, uncapped.
        for name, size in (
            ("_cell_render_cache", CELL_RENDERS),
            ("_row_render_cache", ROW_RENDERS),
            ("_line_cache", LINES),
        ):
            cache = getattr(self, name, None)
            if cache is not None and hasattr(cache, "maxsize"):
                cache.maxsize = size
