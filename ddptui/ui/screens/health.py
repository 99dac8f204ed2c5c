"""The health screen: every host with its versions (odd ones marked), the selected host's GPUs
and findings with their fixes; ``c`` re-checks with live per-host progress."""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from ddptui.check import CheckReport, check_cluster
from ddptui.config import AUTO, Config, load_config
from ddptui.errors import ConfigError
from ddptui.health import HostCheck, parity_rows
from ddptui.health.bandwidth import BandwidthReport
from ddptui.health.groups import FindingGroup
from ddptui.plan.resources import choose_socket_ifname, is_free, present_gpus, selected_gpus
from ddptui.present import check as words
from ddptui.present.bandwidth import bandwidth_matrix
from ddptui.present.trust import host_key_line
from ddptui.probe.facts import NA, HostFacts
from ddptui.run.bandwidth import BandwidthError, measure
from ddptui.ui.messages import CheckDone, CheckProgress
from ddptui.ui.widgets.cells import ODD, bar, cell, in_view, odd_cell
from ddptui.untrusted import plain

COLUMNS = (
    "node", "host", "status", "GPUs", "hostname", "python", "torch", "CUDA", "NCCL", "driver",
    "interface",
)  # fmt: skip
DECIDING = 4
"""The columns that say whether a host can take part come first: node, host, status, GPUs;
the columns whose values differ between hosts follow them, then the rest."""
# Table column → the parity row whose odd hosts it marks.
PARITY_KEY = {
    "python": "python",
    "torch": "torch",
    "CUDA": "torch_cuda",
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
        self, config: Config, report: CheckReport | None = None, *, note: str | None = None
    ) -> None:
        """``note``: a line shown under the check's summary for as long as the screen is."""
        super().__init__()
        self.config = config
        self.report = report
        self.note = note
        self.progress: dict[str, str] = {}
        self.bandwidth: BandwidthReport | None = None
        """The interconnect as ``b`` last measured it."""
        self._odd_columns: list[str] = []
        """The columns whose values differ between hosts, as the table marks them."""

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
        self.sub_title = f"hosts · {plain(str(self.config.path), one_line=True)}"
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
            self.app.config = self.config  # type: ignore[attr-defined]
        self.progress = {host.name: "waiting" for host in self.config.ordered_hosts}
        self._show()
        self._check()

    @work(exclusive=True, group="check")
    async def _check(self) -> None:
        def progress(host: str, event: str) -> None:
            self.post_message(CheckProgress(host, event))

        report = await check_cluster(self.config, progress)
        self.post_message(CheckDone(report))

    def on_check_progress(self, message: CheckProgress) -> None:
        if self.progress:
            self.progress[message.host] = message.event
            self._show()

    def on_check_done(self, message: CheckDone) -> None:
        self.report = message.report
        self.progress = {}
        self.app.report = message.report  # type: ignore[attr-defined]
        self._show()

    @on(DataTable.RowHighlighted, "#hosts")
    def _host_chosen(self) -> None:
        self._show_detail()

    def _show(self) -> None:
        table = self.query_one("#hosts", DataTable)
        row = table.cursor_row
        report = self.report
        checks = {check.host.name: check for check in report.checks} if report else {}
        odd: dict[str, tuple[str, ...]] = {}
        if report is not None:
            probed = [(c.host, c.facts) for c in report.checks if c.facts is not None]
            odd = {parity.key: parity.odd_hosts for parity in parity_rows(probed)}
        self._odd_columns = [column for column, key in PARITY_KEY.items() if odd.get(key)]
        rest = [column for column in COLUMNS[DECIDING:] if column not in self._odd_columns]
        order = [*COLUMNS[:DECIDING], *self._odd_columns, *rest]
        # Laid out afresh: a column keeps the width of the widest value it ever held (a
        # host's progress while checking), and its place follows what differs now.
        table.clear(columns=True)
        table.add_columns(*order)
        for rank, host in enumerate(self.config.ordered_hosts):
            check = checks.get(host.name)
            cells = {"node": cell(rank), "host": cell(host.name)}
            cells["status"] = self._status(host.name, check)
            facts = check.facts if check is not None else None
            if facts is not None and check is not None:
                cells.update(_fact_cells(check, facts, self.config.head.address, odd))
            table.add_row(*(cells.get(column, Text("")) for column in order), key=host.name)
        if table.row_count:
            table.move_cursor(row=min(row, table.row_count - 1))
        self._show_summary()
        self._show_detail()
        # Whether every column fits is known once the table is laid out.
        self.call_after_refresh(self._show_summary)

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

    def _status(self, host: str, check: HostCheck | None) -> Text:
        if host in self.progress:
            return Text(f"… {plain(self.progress[host], limit=20, one_line=True)}", "italic")
        if check is None:
            return Text("–", "dim")
        return words.host_status(check)

    def _summary(self) -> Text:
        if self.progress:
            done = sum(event == "done" for event in self.progress.values())
            return Text(f"checking {len(self.progress)} hosts… ({done} done)", "italic")
        report = self.report
        if report is None:
            return Text("not checked yet: c checks every host")
        summary = words.summary(report)
        if self._odd_columns:
            # What differs decides: named, whether or not its column is in view.
            summary.append(f"  ({ODD} differs between hosts: {', '.join(self._odd_columns)})")
        return summary

    def _selected(self) -> HostCheck | None:
        if self.report is None:
            return None
        table = self.query_one("#hosts", DataTable)
        hosts = self.config.ordered_hosts
        if not 0 <= table.cursor_row < len(hosts):
            return None
        name = hosts[table.cursor_row].name
        return next((c for c in self.report.checks if c.host.name == name), None)

    def _show_detail(self) -> None:
        check = self._selected()
        gpus = self.query_one("#gpus", Static)
        findings = self.query_one("#findings", Static)
        if check is None or self.report is None:
            gpus.update("")
            findings.update("")
            return
        gpus.update(_gpus_text(check))
        text = _findings_text(self.report, check.host.name)
        findings.update(
            text if self.bandwidth is None else Group(text, bandwidth_matrix(self.bandwidth))
        )

    @work(exclusive=True, group="bandwidth")
    async def action_bandwidth(self) -> None:
        if self.report is None or not self.report.healthy:
            self.notify("measure the interconnect once the check finds nothing to fix")
            return
        self.notify(f"measuring the interconnect of {len(self.config.hosts)} hosts…")
        try:
            self.bandwidth = await measure(self.config, self.report)
        except BandwidthError as error:
            self.notify(plain(str(error), limit=300, one_line=True), severity="error", markup=False)
            return
        slow = ", ".join(host.host for host in self.bandwidth.slow)
        self.notify(f"slow links: {slow}" if slow else "no host's links are slow")
        self._show_detail()

    @work(exclusive=True, group="trust")
    async def action_trust(self) -> None:
        from ddptui.remote.hostkeys import append_lines
        from ddptui.remote.trust import lines_to_add, scan_host_keys
        from ddptui.ui.screens.confirm import ConfirmScreen

        self.notify("fetching the hosts' keys…")
        scans = await scan_host_keys(
            self.config.hosts,
            timeout=self.config.cluster.connect_timeout,
            max_parallel=self.config.cluster.max_parallel_connects,
        )
        body = Text("\n").join(host_key_line(scan) for scan in scans)
        additions = lines_to_add(scans)
        if not additions:
            await self.app.push_screen_wait(
                ConfirmScreen("host keys", body, "no unknown key to add; close?")
            )
            return
        count = sum(len(lines) for lines in additions.values())
        question = f"add {count} key(s) to {', '.join(str(path) for path in additions)}?"
        if await self.app.push_screen_wait(ConfirmScreen("trust host keys", body, question)):
            for path, lines in additions.items():
                append_lines(path, lines)
            self.notify(f"added {count} key(s); re-checking")
            self.action_recheck()


def _fact_cells(
    check: HostCheck, facts: HostFacts, head_address: str, odd: dict[str, tuple[str, ...]]
) -> dict[str, Text]:
    """The cells of the columns after status, by column."""
    name = check.host.name
    torch = facts.torch
    values = {
        "python": facts.python.version,
        "torch": torch.version if torch.status == "ok" else torch.status,
        "CUDA": "cpu" if torch.cuda_build is None else torch.cuda_build,
        "NCCL": torch.nccl_version,
        "driver": facts.gpus.driver_version,
    }
    cells = {"hostname": cell(facts.hostname), "GPUs": _gpu_count(check, facts)}
    for column, value in values.items():
        cells[column] = odd_cell(value, name in odd.get(PARITY_KEY[column], ()))
    interface = check.host.socket_ifname
    if interface == AUTO:
        interface = choose_socket_ifname(facts, head_address) or "?"
    cells["interface"] = cell(interface)
    return cells


def _gpu_count(check: HostCheck, facts: HostFacts) -> Text:
    present = present_gpus(facts)
    if not present:
        return Text("none", "dim")
    selected = selected_gpus(check.host, facts)
    free = sum(1 for gpu in selected if is_free(gpu))
    style = "" if free == len(selected) else "yellow"
    return Text(f"{free}/{len(selected)} free", style)


def _gpus_text(check: HostCheck) -> Text:
    text = Text(f"GPUs on {plain(check.host.name, one_line=True)}\n", "bold")
    facts = check.facts
    if facts is None:
        text.append(plain(check.reach.detail or "not probed", limit=400))
        return text
    devices = facts.gpus.devices
    if not devices:
        absence = words.gpu_absence(facts.gpus.problem)
        text.append(plain(absence, limit=200, one_line=True), "dim")
        return text
    for gpu in devices:
        mark = "✓ free" if is_free(gpu) else "● busy"
        text.append(f"{gpu.index} {plain(str(gpu.name), limit=30, one_line=True)}  ")
        text.append(f"{mark}\n", "green" if is_free(gpu) else "yellow")
        used, total = gpu.memory_used_mib, gpu.memory_total_mib
        if used is not NA and total is not NA:
            text.append("  mem ")
            text.append_text(bar(used, total))
            text.append(f" {used}/{total} MiB\n")
        if gpu.utilization_pct is not NA:
            text.append(f"  util {gpu.utilization_pct}%\n")
        if gpu.processes is not NA:
            for process in gpu.processes:
                held = "" if process.used_memory_mib is NA else f" {process.used_memory_mib} MiB"
                name = plain(str(process.name), limit=40, one_line=True)
                text.append(f"  held by {name} (pid {process.pid}){held}\n", "yellow")
    return text


def _findings_text(report: CheckReport, host: str) -> Text:
    text = Text(f"findings for {plain(host, one_line=True)}\n", "bold")
    # The report's own groups, so a finding several hosts share reads as `ddptui check` says it.
    groups = words.listed(report.findings)
    mine = [group for group in groups if host in group.hosts]
    if not mine:
        text.append("none\n", "green")
    text.append_text(_entries(mine))
    shared = _entries([group for group in groups if not group.hosts])
    note = words.port_test_note(report.master_port_test)
    if note is not None:
        shared.append_text(note + "\n")
    if shared:
        text.append("\ncluster-wide\n", "bold")
        text.append_text(shared)
    return text


def _entries(groups: list[FindingGroup]) -> Text:
    text = Text()
    for group in groups:
        text.append_text(words.finding_line(group) + "\n")
        fix = words.fix_line(group)
        if fix is not None:
            text.append_text(Text(" " * words.FIX_INDENT) + fix + "\n")
    return text
