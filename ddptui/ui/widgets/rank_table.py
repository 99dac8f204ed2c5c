"""The run screen's table of ranks: a row per rank, updated in place, whole columns only, in a
DataTable whose render caches fit what it shows."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from rich.text import Text
from textual import events
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from ddptui.run.progress import RankProgress
from ddptui.ui.widgets.cells import cell, in_view, number

CELL_RENDERS = 1024
"""Rendered cells kept: the visible rows' cells twice over. DataTable keeps 10,000 by default,
which for a table whose every cell changes twice a second only holds stale renders: tens of
thousands of objects that each full garbage collection walks (pauses of ~100 ms) and memory
that keeps growing for minutes."""
ROW_RENDERS = 128
LINES = 256
RANK_COLUMNS = ("node", "rank", "step", "loss", "state", "samples/s", "step s", "memory")
"""The state (failed, stalled, straggler) before the rates: at 80 columns the table shows only
its first five (the status line sums the rest up)."""
ALWAYS_SHOWN = 5
"""Columns shown however narrow the table: a cut-off state reads better than none."""


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
        self._shown_columns: list[ColumnKey] = []
        self._widest = [len(name) for name in RANK_COLUMNS]
        """Each column's widest content so far: a column leaves or comes back only when the
        room changes, not with every wider value."""
        self._shown_rows: dict[str, tuple[Text, ...]] = {}

    def lay_out_again(self) -> None:
        """The next :meth:`show` lays every row out anew (a run read back replaces them all)."""
        self._shown_rows = {}

    def show(self, ranks: Sequence[RankProgress], silent: Collection[str]) -> None:
        """One row per rank; ``silent``: the hosts that do not answer. Rows are updated cell
        by cell: rebuilding the table would throw away its render cache on every redraw,
        which costs more than everything else at 64 ranks."""
        every = {str(rank.rank): _rank_cells(rank, rank.host in silent) for rank in ranks}
        for cells in every.values():
            self._widest = [max(w, c.cell_len) for w, c in zip(self._widest, cells, strict=True)]
        room = self.scrollable_content_region.width
        # A column cut at the edge misleads (a rate of 916 read as 9): whole columns or none.
        shown = len(RANK_COLUMNS)
        if room > 0:
            shown = max(
                ALWAYS_SHOWN, in_view(self._widest, room, padding=self.cell_padding).count(True)
            )
        if shown != len(self._shown_columns):
            self.clear(columns=True)
            self._shown_columns = self.add_columns(*RANK_COLUMNS[:shown])
            self._shown_rows = {}
        rows = {key: cells[:shown] for key, cells in every.items()}
        widths = [column.content_width for column in self.columns.values()]
        # An update in place keeps the column's width and would cut a wider value (a loss of
        # 0.008914 shown as "0.00"): laying the rows out again sizes the columns to them.
        wider = any(
            cell.cell_len > width
            for cells in rows.values()
            for cell, width in zip(cells, widths, strict=True)
        )
        if wider or list(rows) != list(self._shown_rows):
            row = self.cursor_row
            self.clear()
            for key, cells in rows.items():
                self.add_row(*cells, key=key)
            if self.row_count:
                self.move_cursor(row=min(row, self.row_count - 1))
        else:
            for key, cells in rows.items():
                for column, (old, new) in enumerate(zip(self._shown_rows[key], cells, strict=True)):
                    if old != new:
                        self.update_cell(key, self._shown_columns[column], new)
        self._shown_rows = rows


def _rank_cells(rank: RankProgress, silent: bool) -> tuple[Text, ...]:
    memory = rank.cuda_peak_mib if rank.cuda_peak_mib is not None else rank.rss_mib
    return (
        cell(f"{rank.node_rank} {rank.host}", limit=18),
        number(rank.rank, "d"),
        number(rank.step, "d"),
        Text("nan/inf", "bold red") if rank.nonfinite else number(rank.loss, ".4g"),
        _state(rank, silent),
        number(rank.samples_per_s, ".0f"),
        number(rank.step_time_s, ".3f"),
        number(memory, ".0f", " MiB"),
    )


def _state(rank: RankProgress, silent: bool) -> Text:
    style = {"failed": "bold red", "killed": "bold red", "done": "green"}.get(rank.state.value, "")
    text = Text(rank.state.value, style)
    if silent:
        # Its host does not answer: no news is not a stall (the status line says more).
        text.append(" ⌁ no answer", "bold yellow")
    elif rank.stalled:
        text.append(" ⏸ stalled", "bold yellow")
    straggler = rank.as_straggler()
    if straggler is not None:
        text.append(f" ▼ straggler +{straggler.slower_by:.0%}", "yellow")
    return text
