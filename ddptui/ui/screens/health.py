"""The health screen: every host with its versions (odd ones marked), the selected host's GPUs
and findings with their fixes; ``c`` re-checks with live per-host progress. A cluster without
fixed hosts (a scheduler's) shows the nodes its check found instead: each one's state and the
scheduler's reason, its GPUs, whether a run gets it."""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static
from textual.widgets.data_table import ColumnKey

from ddptui.config import Config, load_config
from ddptui.errors import ConfigError, DdptuiError
from ddptui.present import check as words
from ddptui.present.bandwidth import bandwidth_matrix, measuring, slow_note
from ddptui.present.hosts import (
    HostRow,
    by_concern,
    differing,
    gpus_text,
    host_rows,
    node_label,
)
from ddptui.present.nodes import NODE_COLUMNS, node_rows, node_text
from ddptui.present.trust import host_key_line
from ddptui.run.control import BandwidthError, BandwidthReport, ClusterCheck, RunControl
from ddptui.ui.messages import CheckDone, CheckFailed, CheckProgress, ClusterRead
from ddptui.ui.owner import control_of
from ddptui.ui.widgets.cells import ODD, cell, in_view, odd_cell
from ddptui.untrusted import plain

COLUMNS = (
    "node", "host", "status", "GPUs", "hostname", "python", "torch", "CUDA", "NCCL", "driver",
    "interface",
)  # fmt: skip
PROGRESS_EVERY_S = 0.25
"""The hosts table is laid out again at most this often while a check runs: a host's every
step laid out all 512 rows anew (a 256-host check took 16 s on the screen, 2 s without it)."""
DECIDING = 4
"""The columns that say whether a host can take part come first: node, host, status, GPUs;
the columns whose values differ between hosts follow them, then the rest."""
# A version column → its field of the host's row (:data:`ddptui.present.hosts.VERSIONS`).
VERSION_FIELD = {
    "python": "python",
    "torch": "torch",
    "CUDA": "cuda",
    "NCCL": "nccl",
    "driver": "driver",
}


class HealthScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "recheck", "re-check"),
        Binding("l", "app.launch", "launch"),
        Binding("t", "trust", "trust keys"),
        Binding("R", "app.runs", "runs"),
        Binding("b", "bandwidth", "measure the interconnect", show=False),
        Binding("question_mark", "app.help", "help"),
    ]

    def __init__(
        self, config: Config, report: ClusterCheck | None = None, *, note: str | None = None
    ) -> None:
        """``note``: a line shown under the check's summary for as long as the screen is."""
        super().__init__()
        self.config = config
        self.report = report
        self.note = note
        self.progress: dict[str, str] = {}
        """Each host's latest step while a check runs."""
        self.checking = False
        self.failure: str | None = None
        """Why the last check could not be made, until one is."""
        self.bandwidth: BandwidthReport | None = None
        """The interconnect as ``b`` last measured it."""
        self._odd_columns: list[str] = []
        """The columns whose values differ between hosts, as the table marks them."""
        self._progress_due = False
        self._layout: tuple[list[str], list[str]] = ([], [])
        """The table's columns and rows (host names) as last laid out."""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="check-status")
        yield DataTable(id="hosts", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="host-detail"):
            with VerticalScroll(id="gpus-pane"):
                yield Static(id="gpus")
            with VerticalScroll(id="findings-pane"):
                yield Static(id="findings")
        yield Footer()

    def on_mount(self) -> None:
        self.title = "ddptui"
        members = "hosts" if self.control.has_fixed_hosts(self.config) else "nodes"
        self.sub_title = f"{members} · {plain(str(self.config.path), one_line=True)}"
        table = self.query_one("#hosts", DataTable)
        self.watch(table, "scroll_x", self._show_summary, init=False)
        self._show()
        if self.report is None:
            self.action_recheck()

    def action_recheck(self) -> None:
        # The file as it is now: edited to fix what the last check found, most likely.
        try:
            self.config = load_config(self.config.path)
        except (ConfigError, OSError) as error:
            self.app.notify(
                f"{plain(str(error), limit=300, one_line=True)}; checking as it was last read",
                severity="error",
                markup=False,
            )
        else:
            self.post_message(ClusterRead(self.config, None))
        hosts = self.config.checked_hosts if self.control.has_fixed_hosts(self.config) else ()
        self.progress = {host.name: "waiting" for host in hosts}
        self.checking = True
        self._show()
        self._check()

    @property
    def control(self) -> RunControl:
        """The app's: the one way this screen checks, measures and trusts."""
        return control_of(self.app)

    @work(exclusive=True, group="check")
    async def _check(self) -> None:
        def progress(host: str, event: str) -> None:
            self.post_message(CheckProgress(host, event))

        try:
            report = await self.control.check(self.config, progress)
        except DdptuiError as error:
            self.post_message(CheckFailed(str(error)))
            return
        self.post_message(CheckDone(report))

    def on_check_progress(self, message: CheckProgress) -> None:
        if self.progress:
            self.progress[message.host] = message.event
            if not self._progress_due:
                self._progress_due = True
                self.set_timer(PROGRESS_EVERY_S, self._show_progress)

    def _show_progress(self) -> None:
        self._progress_due = False
        if self.checking:
            self._show()

    def on_check_failed(self, message: CheckFailed) -> None:
        self.progress, self.checking = {}, False
        self.failure = message.why
        self._show()

    def on_check_done(self, message: CheckDone) -> None:
        self.report, self.failure = message.report, None
        self.progress = {}
        self.checking = False
        self.post_message(ClusterRead(self.config, message.report))
        self._show()

    @on(DataTable.RowHighlighted, "#hosts")
    def _host_chosen(self) -> None:
        self._show_detail()

    def _show(self) -> None:
        table = self.query_one("#hosts", DataTable)
        row = table.cursor_row
        if self.control.has_fixed_hosts(self.config):
            self._show_hosts(table)
        else:
            self._odd_columns, self._layout = [], ([], [])
            table.clear(columns=True)
            table.add_columns(*NODE_COLUMNS)
            for node in node_rows(self.report):
                table.add_row(*node.cells, key=node.name)
        if table.row_count:
            table.move_cursor(row=min(row, table.row_count - 1))
        self._show_summary()
        self._show_detail()
        # Whether every column fits is known once the table is laid out.
        self.call_after_refresh(self._show_summary)

    def _show_hosts(self, table: DataTable[Text]) -> None:
        rows = by_concern(host_rows(self.config, self.report, self.progress), self.report)
        odd = differing(rows)
        self._odd_columns = [column for column, key in VERSION_FIELD.items() if key in odd]
        rest = [column for column in COLUMNS[DECIDING:] if column not in self._odd_columns]
        order = [*COLUMNS[:DECIDING], *self._odd_columns, *rest]
        layout = (order, [host.name for host in rows])
        status = table.columns.get(ColumnKey("status"))
        widest = max((host.status.cell_len for host in rows), default=0)
        if self.checking and layout == self._layout and status and widest <= status.content_width:
            # While a check runs only the hosts' progress moves: laying 512 rows out anew
            # measures every cell again (and a narrower cell updated with its width measures
            # its whole column).
            for host in rows:
                table.update_cell(host.name, status.key, host.status)
            return
        # Laid out afresh: a column keeps the width of the widest value it ever held (a
        # host's progress while checking), and its place follows what differs now.
        table.clear(columns=True)
        for column in order:
            table.add_column(column, key=column)
        for host in rows:
            cells = _cells(host)
            table.add_row(*(cells.get(column, Text("")) for column in order), key=host.name)
        self._layout = layout

    def on_resize(self) -> None:
        self.call_after_refresh(self._show_summary)

    def _show_summary(self) -> None:
        summary = self._summary()
        table = self.query_one("#hosts", DataTable)
        widths = [column.content_width for column in table.columns.values()]
        shown = in_view(
            widths,
            table.scrollable_content_region.width,
            scroll=round(table.scroll_x),
            padding=table.cell_padding,
        )
        hidden = [
            column.label.plain
            for column, seen in zip(table.columns.values(), shown, strict=True)
            if not seen
        ]
        if hidden:
            summary.append(f"  not in view: {', '.join(hidden)} (←/→)", "bold")
        if self.note:
            summary.append("\n" + plain(self.note, one_line=True), "italic")
        self.query_one("#check-status", Static).update(summary)

    def _summary(self) -> Text:
        if self.checking:
            hosts = self.control.checked_hosts(self.config)
            return Text(words.checking(self.progress, hosts), "italic")
        if self.failure is not None:
            failed = Text("the check could not be made: ", "bold red")
            return failed.append(plain(self.failure, limit=400, one_line=True))
        report = self.report
        if report is None:
            return Text("not checked yet: c checks the cluster")
        summary = words.summary(report)
        if self._odd_columns:
            # What differs decides: named, whether or not its column is in view.
            summary.append(f"  ({ODD} differs between hosts: {', '.join(self._odd_columns)})")
        return summary

    def _show_detail(self) -> None:
        gpus = self.query_one("#gpus", Static)
        findings = self.query_one("#findings", Static)
        name = self._selected()
        about = gpus_text if self.control.has_fixed_hosts(self.config) else node_text
        shown = about(self.report, name) if self.report and name else None
        if self.report is None or name is None or shown is None:
            gpus.update("")
            findings.update("")
            return
        gpus.update(shown)
        text = words.findings_text(self.report, name)
        findings.update(
            text if self.bandwidth is None else Group(text, bandwidth_matrix(self.bandwidth))
        )

    def _selected(self) -> str | None:
        """The name of the host (or node) the cursor is on."""
        table = self.query_one("#hosts", DataTable)
        if not 0 <= table.cursor_row < table.row_count:
            return None
        key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key
        return None if key.value is None else str(key.value)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # A scheduler's nodes are reached through it: no host keys of ddptui's to trust, no
        # links of its own to measure.
        if action in ("trust", "bandwidth"):
            return self.control.has_fixed_hosts(self.config)
        return True

    @work(exclusive=True, group="bandwidth")
    async def action_bandwidth(self) -> None:
        if self.report is None or not self.report.healthy:
            self.notify("measure the interconnect once the check finds nothing to fix")
            return
        self.notify(measuring(len(self.config.hosts)), markup=False)
        try:
            self.bandwidth = await self.control.measure(self.config, self.report)
        except BandwidthError as error:
            self.notify(plain(str(error), limit=300, one_line=True), severity="error", markup=False)
            return
        self.notify(slow_note(self.bandwidth), markup=False)
        self._show_detail()

    @work(exclusive=True, group="trust")
    async def action_trust(self) -> None:
        from ddptui.ui.screens.confirm import ConfirmScreen

        self.notify("fetching the hosts' keys…")
        control = self.control
        scans = await control.scan_host_keys(self.config)
        body = Text("\n").join(host_key_line(scan) for scan in scans)
        additions = control.keys_to_add(scans)
        if not additions:
            await self.app.push_screen_wait(
                ConfirmScreen("host keys", body, "no unknown key to add; close?")
            )
            return
        count = sum(len(lines) for lines in additions.values())
        question = f"add {count} key(s) to {', '.join(str(path) for path in additions)}?"
        if await self.app.push_screen_wait(ConfirmScreen("trust host keys", body, question)):
            for path, lines in additions.items():
                control.add_host_keys(path, lines)
            self.notify(f"added {count} key(s); re-checking")
            self.action_recheck()


def _cells(row: HostRow) -> dict[str, Text]:
    """A host's row as the table's cells, by column; a version that differs between hosts is
    marked."""
    cells = {"node": cell(node_label(row)), "host": cell(row.name), "status": row.status}
    if not row.probed:
        return cells
    cells.update(
        {"GPUs": row.gpus, "hostname": cell(row.hostname), "interface": cell(row.interface)}
    )
    for column, key in VERSION_FIELD.items():
        cells[column] = odd_cell(getattr(row, key), key in row.odd)
    return cells
