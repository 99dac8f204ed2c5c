"""The run screen's table of ranks: a row per rank, or at a large cluster's size a row per node
(the worst first, each expanded into its ranks on request), updated in place, whole columns
only, in a DataTable whose render caches fit what it shows."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import events
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from ddptui.run.following.progress import RankProgress
from ddptui.run.following.state import STUCK, WAITING, Hang, Judgement, Straggler
from ddptui.ui.widgets.cells import cell, figure, in_view, number
from ddptui.untrusted import plain

CELL_RENDERS = 1024
"""Rendered cells kept: the visible rows' cells twice over. DataTable keeps 10,000 by default,
which for a table whose every cell changes twice a second only holds stale renders: tens of
thousands of objects that each full garbage collection walks (pauses of ~100 ms) and memory
that keeps growing for minutes."""
ROW_RENDERS = 128
LINES = 256
RANK_COLUMNS = ("node", "rank", "step", "loss", "state", "samples/s", "step s", "memory")
"""The state (failed, stuck in a hang, straggler) before the rates: at 80 columns the table
shows only its first five (the status line sums the rest up)."""
GROUP_ABOVE = 64
"""More ranks than this are shown a row per node: 1,024 rows are read by nobody."""
STATE_STYLES = {"failed": "bold red", "killed": "bold red", "done": "green"}
ALWAYS_SHOWN = 5
"""Columns shown however narrow the table: a cut-off state reads better than none."""
PAGES_KEPT_FRESH = 1
"""Grouped, the rows a page above and below the view are worked out anew at each redraw as
well as those in view; the others keep their last figures (their order is always fresh) until
scrolled to. At 512 nodes, working out every row took a quarter of the console's time."""


class RankTable(DataTable[Any]):
    class Resized(Message):
        """The table's size changed: which columns fit whole may have too."""

    class Scrolled(Message):
        """Rows came into view whose figures may be a redraw old."""

    def on_resize(self, event: events.Resize) -> None:
        self.post_message(self.Resized())

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self._grouped and round(old_value) != round(new_value):
            self.post_message(self.Scrolled())

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
        self._column_widths: list[int] = []
        self._widest = [len(name) for name in RANK_COLUMNS]
        """Each column's widest content so far: a column leaves or comes back only when the
        room changes, not with every wider value."""
        self._shown_rows: dict[str, tuple[Text, ...]] = {}
        self.expanded: set[int] = set()
        """The nodes whose ranks are shown under their row (grouped)."""
        self._grouped = False
        self._rows: dict[str, _Row] = {}
        self._targets: list[tuple[str, int]] = []
        self._row_nodes: list[int] = []
        self._severities: list[int] = []
        self._worst_words: list[str] = []

    def lay_out_again(self) -> None:
        """The next :meth:`show` lays every row out anew (a run read back replaces them all)."""
        self._shown_rows = {}
        self._rows = {}

    @property
    def grouped(self) -> bool:
        """A row per node, each expanded on request, rather than one per rank."""
        return self._grouped

    def rank_at(self, row: int) -> int | None:
        """The rank of row ``row``; None for a node's row or past the rows."""
        target = self._targets[row] if 0 <= row < len(self._targets) else None
        return target[1] if target is not None and target[0] == "rank" else None

    def node_at(self, row: int) -> int | None:
        """The node (rank) of row ``row``, whether it is the node's row or one of its ranks'."""
        return self._row_nodes[row] if 0 <= row < len(self._row_nodes) else None

    def toggle(self, node: int) -> None:
        """Expand the node's row into its ranks', or fold them back."""
        self.expanded ^= {node}

    def worst(self) -> tuple[int, str] | None:
        """The row of the worst node (grouped) or rank, and what is wrong with it; None when
        nothing is."""
        if not self._severities or max(self._severities) == 0:
            return None
        row = self._severities.index(max(self._severities))
        return row, self._worst_words[row]

    def show(self, ranks: Sequence[RankProgress], judgement: Judgement) -> None:
        """One row per rank, or past :data:`GROUP_ABOVE` ranks one per node (the worst first)
        with the expanded nodes' ranks under theirs, each marked as the supervisor's
        ``judgement`` says: its host silent, its part in a hang, a straggler. Rows are updated
        cell by cell: rebuilding the table would throw away its render cache on every redraw,
        which costs more than everything else at 64 ranks."""
        self._grouped = len(ranks) > GROUP_ABOVE
        marks = _Marks.of_judgement(judgement)
        rows = (
            _grouped_rows(ranks, marks, self.expanded, self._fresh_rows(), self._rows)
            if self._grouped
            else _flat_rows(ranks, marks)
        )
        self._rows = rows
        every = {key: row.cells for key, row in rows.items()}
        self._targets = [row.target for row in rows.values()]
        self._row_nodes = [row.node for row in rows.values()]
        self._severities = [row.severity for row in rows.values()]
        self._worst_words = [row.words for row in rows.values()]
        for cells in every.values():
            self._widest = [max(w, c.cell_len) for w, c in zip(self._widest, cells, strict=True)]
        room = self.scrollable_content_region.width
        # A column cut at the edge misleads (a rate of 916 read as 9): whole columns or none.
        shown = len(RANK_COLUMNS)
        if room > 0:
            shown = max(
                ALWAYS_SHOWN, in_view(self._widest, room, padding=self.cell_padding).count(True)
            )
        widths = self._widest[:shown]
        if widths != self._column_widths:
            # Each column as wide as its widest value so far, set here: an update in place
            # would cut a wider value (a loss of 0.008914 shown as "0.00"), and a width the
            # table measures itself comes only when it is next idle, so a screen drawn before
            # (or never drawn again: a finished run) showed every value cut to its header.
            self.clear(columns=True)
            self._shown_columns = [
                self.add_column(name, width=width)
                for name, width in zip(RANK_COLUMNS, widths, strict=False)
            ]
            self._column_widths = widths
            self._shown_rows = {}
        cut = {key: cells[:shown] for key, cells in every.items()}
        if list(cut) != list(self._shown_rows):
            self._lay_out(cut)
        else:
            for key, cells in cut.items():
                for column, (old, new) in enumerate(zip(self._shown_rows[key], cells, strict=True)):
                    if old != new:
                        self.update_cell(key, self._shown_columns[column], new)
        self._shown_rows = cut

    def _fresh_rows(self) -> range:
        """The rows worked out anew: those in view and a page either side."""
        page = max(self.scrollable_content_region.height, 1)
        top = round(self.scroll_y)
        return range(max(0, top - page * PAGES_KEPT_FRESH), top + page * (1 + PAGES_KEPT_FRESH))

    def _lay_out(self, rows: dict[str, tuple[Text, ...]]) -> None:
        """The rows anew, the cursor kept on the row it was on (rows move as the worst rise)."""
        keys = list(self._shown_rows)
        was = keys[self.cursor_row] if 0 <= self.cursor_row < len(keys) else None
        row = self.cursor_row
        self.clear()
        for key, cells in rows.items():
            self.add_row(*cells, key=key)
        if self.row_count:
            if was in rows:
                row = list(rows).index(was)
            self.move_cursor(row=min(row, self.row_count - 1))


@dataclass(frozen=True)
class _Marks:
    """What the supervisor says of the hosts and ranks beyond their numbers."""

    silent: Collection[str]
    """The hosts that do not answer."""
    hang: Hang | None
    stragglers: Mapping[int, Straggler]

    @classmethod
    def of_judgement(cls, judgement: Judgement) -> _Marks:
        stragglers = {straggler.rank: straggler for straggler in judgement.stragglers}
        return cls(set(judgement.notes), judgement.hang, stragglers)

    def of(self, rank: RankProgress) -> tuple[bool, str | None]:
        """Whether ``rank``'s host does not answer, and its part in the hang."""
        return rank.host in self.silent, None if self.hang is None else self.hang.part(rank.rank)

    def straggler(self, rank: RankProgress) -> Straggler | None:
        return self.stragglers.get(rank.rank)


@dataclass(frozen=True)
class _Row:
    cells: tuple[Text, ...]
    target: tuple[str, int]
    """``("rank", N)`` or ``("node", N)``: what choosing the row means."""
    node: int
    severity: int
    words: str


def _flat_rows(ranks: Sequence[RankProgress], marks: _Marks) -> dict[str, _Row]:
    return {str(rank.rank): _rank_row(rank, marks) for rank in ranks}


def _rank_row(rank: RankProgress, marks: _Marks, *, indent: bool = False) -> _Row:
    host = plain(rank.host, limit=64, one_line=True)
    state = _state(rank, marks)
    return _Row(
        _rank_cells(rank, state, indent=indent),
        ("rank", rank.rank),
        rank.node_rank,
        _severity(rank, marks),
        f"rank {rank.rank} on {host}: {state.plain}",
    )


def _grouped_rows(
    ranks: Sequence[RankProgress],
    marks: _Marks,
    expanded: Collection[int],
    fresh: range | None = None,
    kept: Mapping[str, _Row] | None = None,
) -> dict[str, _Row]:
    """A row per node, the worst first (healthy nodes in node order, so rows do not jump
    while nothing is wrong), each expanded node's ranks under its row.

    A node's row at a position outside ``fresh`` (None: every position) is its row in
    ``kept``, where there is one, with only its severity brought up to date. The first row,
    the worst, is always worked out anew: :meth:`RankTable.worst` names it."""
    nodes: dict[int, list[RankProgress]] = {}
    for rank in ranks:
        nodes.setdefault(rank.node_rank, []).append(rank)
    severities = {
        node: [_severity(rank, marks) for rank in members] for node, members in nodes.items()
    }
    order = sorted(nodes, key=lambda node: (-max(severities[node]), node))
    kept = kept or {}
    rows: dict[str, _Row] = {}
    for node in order:
        key, members, severity = f"node{node}", nodes[node], max(severities[node])
        old = kept.get(key)
        if old is not None and rows and fresh is not None and len(rows) not in fresh:
            rows[key] = (
                old if old.severity == severity else dataclasses.replace(old, severity=severity)
            )
        else:
            state = _node_state(members, severities[node], marks)
            host = plain(members[0].host, limit=64, one_line=True)
            rows[key] = _Row(
                _node_cells(node, members, state, node in expanded),
                ("node", node),
                node,
                severity,
                f"node {node} {host}: {state.plain}",
            )
        if node in expanded:
            for rank in members:
                rows[str(rank.rank)] = _rank_row(rank, marks, indent=True)
    return rows


def _severity(rank: RankProgress, marks: _Marks) -> int:
    """How much a rank's row asks to be looked at: failed, then not answering or stuck in a
    hang, then a straggler, then one that waits in the hang or whose loss is no number."""
    silent, part = marks.of(rank)
    if rank.state.value in ("failed", "killed"):
        return 4
    if silent or part == STUCK:
        return 3
    if marks.straggler(rank) is not None:
        return 2
    return 1 if rank.nonfinite or part == WAITING else 0


def _node_cells(
    node: int, ranks: list[RankProgress], state: Text, expanded: bool
) -> tuple[Text, ...]:
    steps = [rank.step for rank in ranks if rank.step is not None]
    losses = [rank.loss for rank in ranks if rank.loss is not None]
    speeds = [rank.samples_per_s for rank in ranks if rank.samples_per_s is not None]
    times = [rank.step_time_s for rank in ranks if rank.step_time_s is not None]
    memories = [_memory(rank) for rank in ranks]
    step = number(min(steps, default=None), "d")
    if steps and min(steps) != max(steps):
        step = Text(f"{figure(min(steps), 'd')}–{figure(max(steps), 'd')}", justify="right")
    return (
        cell(f"{'▾' if expanded else '▸'} {node} {ranks[0].host}", "bold", limit=18),
        Text(f"{ranks[0].rank}–{ranks[-1].rank}", justify="right"),
        step,
        Text("nan/inf", "bold red")
        if any(rank.nonfinite for rank in ranks)
        else number(statistics.median(losses) if losses else None, ".4g"),
        state,
        number(sum(speeds) if speeds else None, ".0f"),
        number(max(times, default=None), ".3f"),
        number(max((m for m in memories if m is not None), default=None), ".0f", " MiB"),
    )


def _node_state(ranks: list[RankProgress], severities: list[int], marks: _Marks) -> Text:
    """How many of the node's ranks are in each state, the worst first (``severities``: each
    rank's), the ranks stuck or waiting in a hang, and its worst straggler."""
    counts: dict[str, int] = {}
    by_severity = sorted(zip(severities, ranks, strict=True), key=lambda pair: -pair[0])
    for _, rank in by_severity:
        counts[rank.state.value] = counts.get(rank.state.value, 0) + 1
    text = Text()
    for index, (state, count) in enumerate(counts.items()):
        text.append(f"{', ' if index else ''}{count} {state}", STATE_STYLES.get(state, ""))
    parts = [marks.of(rank)[1] for rank in ranks]
    stuck = [rank.rank for rank, part in zip(ranks, parts, strict=True) if part == STUCK]
    if marks.of(ranks[0])[0]:
        text.append(" ⌁ no answer", "bold yellow")
    elif stuck:
        more = f" +{len(stuck) - 1}" if len(stuck) > 1 else ""
        text.append(f" ⏸ r{stuck[0]}{more} {STUCK}", "bold red")
    elif WAITING in parts:
        text.append(f" … {parts.count(WAITING)} {WAITING}", "yellow")
    stragglers = [s for rank in ranks if (s := marks.straggler(rank)) is not None]
    if stragglers:
        slowest = max(stragglers, key=lambda straggler: straggler.slower_by)
        text.append(f" ▼ r{slowest.rank} +{slowest.slower_by:.0%}", "yellow")
    return text


def _memory(rank: RankProgress) -> float | None:
    """The rank's peak CUDA memory, else its process's RSS."""
    return rank.cuda_peak_mib if rank.cuda_peak_mib is not None else rank.rss_mib


def _rank_cells(rank: RankProgress, state: Text, *, indent: bool = False) -> tuple[Text, ...]:
    return (
        cell(f"{'  ' if indent else ''}{rank.node_rank} {rank.host}", limit=18),
        number(rank.rank, "d"),
        number(rank.step, "d"),
        Text("nan/inf", "bold red") if rank.nonfinite else number(rank.loss, ".4g"),
        state,
        number(rank.samples_per_s, ".0f"),
        number(rank.step_time_s, ".3f"),
        number(_memory(rank), ".0f", " MiB"),
    )


def _state(rank: RankProgress, marks: _Marks) -> Text:
    text = Text(rank.state.value, STATE_STYLES.get(rank.state.value, ""))
    silent, part = marks.of(rank)
    if silent:
        # Its host does not answer: no news is not a hang (the status line says more).
        text.append(" ⌁ no answer", "bold yellow")
    elif part == STUCK:
        # The status line says why (its process stopped, its host silent…).
        text.append(f" ⏸ {STUCK}", "bold red")
    elif part == WAITING:
        text.append(f" … {WAITING}", "yellow")
    straggler = marks.straggler(rank)
    if straggler is not None:
        text.append(f" ▼ straggler +{straggler.slower_by:.0%}", "yellow")
    return text
