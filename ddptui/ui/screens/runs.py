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

from ddptui.present.runs import COLUMNS, run_row
from ddptui.run.control import RunControl
from ddptui.run.record import RunRecord
from ddptui.ui.messages import OpenRun
from ddptui.untrusted import plain


class RunsScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "open / attach"),
        Binding("f5", "refresh", "refresh"),
        Binding("escape", "back", "back"),
        Binding("question_mark", "app.help", "help"),
    ]

    def __init__(self, control: RunControl, *, now: float | None = None) -> None:
        super().__init__()
        self.control = control
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
        self.query_one("#runs", DataTable).add_columns(*COLUMNS)
        self.action_refresh()

    def action_refresh(self) -> None:
        # The catalogue RunControl keeps: a scheduler's run whose end no supervisor saw reads
        # as the scheduler says it ended.
        catalogue = self.control.catalogue()
        self.records = list(reversed(catalogue.records))
        table = self.query_one("#runs", DataTable)
        table.clear()
        now = self.now if self.now is not None else time.time()
        for record in self.records:
            table.add_row(*run_row(record, now).cells())
        count = len(self.records)
        counted = Text(f"{count} run{'s' * (count != 1)}, newest first; enter opens one")
        for run_id, why in catalogue.unreadable.items():
            counted.append(f"\n{run_id}: {plain(why, limit=300, one_line=True)}", "red")
        self.query_one("#runs-status", Static).update(counted)

    @on(DataTable.RowSelected, "#runs")
    def _chosen(self) -> None:
        self.action_open()

    def action_open(self) -> None:
        table = self.query_one("#runs", DataTable)
        if 0 <= table.cursor_row < len(self.records):
            self.post_message(OpenRun(self.records[table.cursor_row]))

    def action_back(self) -> None:
        self.app.pop_screen()
