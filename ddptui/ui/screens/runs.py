"""The runs screen: every run in the store with its outcome and duration; enter opens one
(following it when it still runs)."""

from __future__ import annotations

import time
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from ddptui.run.store import RunRecord, RunState, RunStore
from ddptui.ui.widgets.cells import cell

STATE_STYLE = {
    RunState.FAILED: "red",
    RunState.COMPLETED: "green",
    RunState.STOPPED: "yellow",
}


class RunsScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "open / attach"),
        Binding("f5", "refresh", "refresh"),
        Binding("escape", "back", "back"),
        Binding("question_mark", "app.help", "help"),
    ]

    def __init__(self, store: RunStore, *, now: float | None = None) -> None:
        super().__init__()
        self.store = store
        self.now = now
        self.records: list[RunRecord] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="runs-status")
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.title = "ddptui"
        self.sub_title = "runs"
        columns = ("run", "state", "hosts", "ranks", "tries", "started", "took")
        self.query_one("#runs", DataTable).add_columns(*columns)
        self.action_refresh()

    def action_refresh(self) -> None:
        self.records = list(reversed(self.store.records()))
        table = self.query_one("#runs", DataTable)
        table.clear()
        now = self.now if self.now is not None else time.time()
        for record in self.records:
            ended = record.attempts[-1].ended if record.attempts else None
            took = (ended or now) - record.created
            table.add_row(
                cell(record.id + (" (demo)" if record.demo else "")),
                Text(record.state.value, STATE_STYLE.get(record.state, "bold")),
                cell(", ".join(node.host for node in record.nodes), limit=24),
                cell(record.world_size),
                cell(len(record.attempts)),
                cell(time.strftime("%m-%d %H:%M", time.gmtime(record.created))),
                cell(_duration(took)),
            )
        count = len(self.records)
        counted = f"{count} run{'s' * (count != 1)}, newest first; enter opens one"
        self.query_one("#runs-status", Static).update(Text(counted))

    @on(DataTable.RowSelected, "#runs")
    def _chosen(self) -> None:
        self.action_open()

    def action_open(self) -> None:
        table = self.query_one("#runs", DataTable)
        if 0 <= table.cursor_row < len(self.records):
            self.app.open_run(self.records[table.cursor_row])  # type: ignore[attr-defined]

    def action_back(self) -> None:
        self.app.pop_screen()


def _duration(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"
