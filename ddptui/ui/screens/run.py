"""The run screen: every rank's progress, the loss chart, the classified errors, each rank's
log (following, filterable with ``/``) and each node's GPUs; stop, kill and resume keys.

Updates arrive as :class:`RunChanged` messages (the newest replaces those pending) and the
screen redraws at most every :data:`REDRAW_S`, only the pane on show.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import ContentSwitcher, DataTable, Footer, Header, Input, RichLog, Static
from textual.widgets.data_table import ColumnKey

from ddptui.config import Config
from ddptui.run.diagnose import marks_error
from ddptui.run.progress import RankProgress
from ddptui.run.store import RunRecord, RunState, RunStore
from ddptui.run.watch import RankLog, RunWatch, Verdict
from ddptui.ui.messages import REDRAW_S, RunChanged, RunEnded, Said
from ddptui.ui.widgets.cells import bar, cell, number
from ddptui.ui.widgets.loss_chart import LossChart
from ddptui.ui.widgets.rank_table import RankTable
from ddptui.untrusted import plain

LOG_VIEW_LINES = 2000
GPU_HISTORY = 60
"""Utilisation samples kept per GPU (one per heartbeat) for the sparkline."""
SPARK = "▁▂▃▄▅▆▇█"
CHART_EVERY_S = 0.5
TABLE_EVERY_S = 0.5
RANK_COLUMNS = ("node", "rank", "step", "loss", "state", "samples/s", "step s", "memory")
"""The state (failed, stalled, straggler) before the rates: at 80 columns the table shows only
its first five."""


class RunScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "stop", "stop"),
        Binding("K", "kill", "kill"),
        Binding("r", "resume", "resume"),
        Binding("slash", "filter", "filter log"),
        Binding("n", "next_error(1)", "next error"),
        Binding("N", "next_error(-1)", "previous error", show=False),
        Binding("f", "follow_log", "follow log", show=False),
        Binding("e", "pane('errors')", "errors"),
        Binding("o", "pane('log')", "log"),
        Binding("g", "pane('gpus')", "GPUs"),
        Binding("y", "log_scale", "log scale"),
        Binding("a", "all_ranks", "all ranks"),
        Binding("escape", "back", "back"),
        Binding("question_mark", "app.help", "help"),
    ]

    def __init__(
        self,
        record: RunRecord,
        *,
        config: Config | None = None,
        store: RunStore | None = None,
        watch: RunWatch | None = None,
        follow: bool = True,
    ) -> None:
        super().__init__()
        self.record = record
        self.config = config
        self.store = store
        self.run_watch = watch or RunWatch(record)
        self.follow = follow
        self.following = False
        self.verdict: Verdict | None = None
        self.dirty = True
        self.note = ""
        self.log_rank = 0
        self.chart_rank: int | None = None
        self.log_filter = ""
        self._last_log: RankLog | None = None
        self._log_written = 0
        """Lines written to the log view since it was last cleared; it keeps the last
        :data:`LOG_VIEW_LINES` of them."""
        self._log_errors: deque[int] = deque(maxlen=LOG_VIEW_LINES)
        """The numbers (counted as ``_log_written``) of the lines that mark an error."""
        self._gpu_history: dict[tuple[str, int], deque[float]] = {}
        """Utilisation (%) per GPU, one sample per heartbeat."""
        self._gpu_memory: dict[tuple[str, int], deque[float]] = {}
        """Memory in use (% of the GPU's) per GPU, one sample per heartbeat."""
        self._last_samples: dict[str, Mapping[str, Any]] = {}
        self._columns: list[ColumnKey] = []
        self._rows: dict[str, tuple[Text, ...]] = {}
        self._chart_due = self._table_due = 0.0
        self._shown_texts: dict[str, Text] = {}

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="run-status")
        with Horizontal(id="run-top"):
            yield RankTable(id="ranks", cursor_type="row", zebra_stripes=True)
            yield LossChart(id="loss")
        with ContentSwitcher(id="run-panes", initial="errors"):
            with VerticalScroll(id="errors"):
                yield Static(id="errors-text")
            yield RichLog(id="log", max_lines=LOG_VIEW_LINES, markup=False, wrap=False)
            with VerticalScroll(id="gpus"):
                yield Static(id="gpus-text")
        yield Input(placeholder="filter the log (enter keeps it, esc clears)", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        self.title = "ddptui"
        self.sub_title = f"run {self.record.id}"
        self._columns = self.query_one("#ranks", DataTable).add_columns(*RANK_COLUMNS)
        self.query_one("#filter", Input).display = False
        self.set_interval(REDRAW_S, self._redraw)
        self._redraw()
        if self.follow and self.config and self.store:
            if self.record.state.final:
                self._read_back()
            else:
                self._follow()

    # --- following -------------------------------------------------------------------------

    @work(exclusive=True, group="follow")
    async def _follow(self) -> None:
        from ddptui.run.watch import supervise

        assert self.config is not None and self.store is not None
        self.following = True
        try:
            verdict = await supervise(
                self.record,
                self.config,
                self.store,
                on_change=self._changed,
                watch=self.run_watch,
            )
        finally:
            self.following = False
        self.post_message(RunEnded(self.record, verdict))

    @work(exclusive=True, group="follow")
    async def _read_back(self) -> None:
        """A finished run: its files as they stand on the hosts (logs, losses, errors)."""
        from ddptui.run.watch import snapshot

        assert self.config is not None
        self.say(f"reading run {self.record.id}'s files on its hosts…")
        self.run_watch = await snapshot(self.record, self.config)
        self._rows, self._last_log, self._chart_due, self._table_due = {}, None, 0.0, 0.0
        self.say(f"run {self.record.id} {self.record.state.value}: as its files stand")

    def _changed(self, watch: RunWatch) -> None:
        self.post_message(RunChanged(watch))

    def on_run_changed(self, message: RunChanged) -> None:
        self.dirty = True

    def on_run_ended(self, message: RunEnded) -> None:
        self.verdict = message.verdict
        self._reload()
        self._table_due = 0.0
        self.dirty = True

    def on_said(self, message: Said) -> None:
        self.note = message.line
        self._table_due = 0.0
        self.dirty = True

    def say(self, line: str) -> None:
        self.post_message(Said(line))

    def _reload(self) -> None:
        if self.store is not None:
            self.record = self.store.load(self.record.id)

    @property
    def running(self) -> bool:
        """The run goes on (as far as this console knows)."""
        return self.verdict is None and not self.record.state.final

    # --- keys ------------------------------------------------------------------------------

    def action_stop(self) -> None:
        self._stop(kill=False)

    def action_kill(self) -> None:
        self._stop(kill=True)

    @work(exclusive=True, group="act")
    async def _stop(self, kill: bool) -> None:
        from ddptui.run.stopper import stop_run
        from ddptui.ui.screens.confirm import ConfirmScreen

        if self.config is None or self.store is None:
            return
        how = (
            "SIGTERM to every node's processes at once, then SIGKILL: no checkpoint."
            if kill
            else "Ask the trainer to checkpoint and stop, then SIGTERM and SIGKILL what is left."
        )
        hosts = ", ".join(node.host for node in self.record.nodes)
        body = Text(f"{how}\nhosts: {plain(hosts, one_line=True)}")
        verb = "kill" if kill else "stop"
        if not await self.app.push_screen_wait(
            ConfirmScreen(f"{verb} run {self.record.id}", body, f"{verb} the run?")
        ):
            return
        self.say(f"{verb}ping run {self.record.id}…")
        report = await stop_run(self.config, self.record, self.store, kill=kill, say=self.say)
        self._reload()
        done = "stopped cleanly" if report.clean else "stopped; not everything confirmed gone"
        self.say(f"run {self.record.id} {done} in {report.seconds:.1f} s")

    @work(exclusive=True, group="act")
    async def action_resume(self) -> None:
        from ddptui.remote.connection import RemoteCluster
        from ddptui.run.launcher import resume

        if self.config is None or self.store is None:
            return
        self._reload()
        if not self.record.state.final or self.following:
            self.say("the run is still going: stop it (s) before resuming")
            return
        hosts = [self.config.host(node.host) for node in self.record.nodes]
        async with RemoteCluster(
            hosts, connect_timeout=self.config.cluster.connect_timeout
        ) as remote:
            self.record = await resume(self.config, self.record, self.store, remote, say=self.say)
        self.run_watch = RunWatch(self.record)
        self.verdict = None
        self._last_log = None
        self.query_one("#log", RichLog).clear()
        self.say(f"run {self.record.id} resumed (attempt {self.record.attempt.number})")
        self._follow()

    def action_filter(self) -> None:
        self.query_one("#run-panes", ContentSwitcher).current = "log"
        field = self.query_one("#filter", Input)
        field.display = True
        field.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.log_filter = event.value
        self._rebuild_log()

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        self.query_one("#ranks", DataTable).focus()

    def action_back(self) -> None:
        field = self.query_one("#filter", Input)
        if field.display:
            field.value = ""
            field.display = False
            self.query_one("#ranks", DataTable).focus()
            return
        self.app.pop_screen()

    def action_pane(self, pane: str) -> None:
        self.query_one("#run-panes", ContentSwitcher).current = pane
        self._table_due = 0.0
        self.dirty = True
        if pane == "log":
            self._rebuild_log()

    def action_log_scale(self) -> None:
        chart = self.query_one(LossChart)
        chart.log_scale = not chart.log_scale
        self.dirty = True

    def action_all_ranks(self) -> None:
        self.chart_rank = None
        self._chart_due = 0.0
        self.dirty = True

    @on(DataTable.RowSelected, "#ranks")
    def _rank_chosen(self, event: DataTable.RowSelected) -> None:
        ranks = self.run_watch.progress.ranks
        if 0 <= event.cursor_row < len(ranks):
            self.chart_rank = self.log_rank = ranks[event.cursor_row].rank
            self._chart_due = 0.0
            self.action_pane("log")

    # --- drawing ---------------------------------------------------------------------------

    def _redraw(self) -> None:
        if not self.dirty or not self.is_current:
            return
        watch = self.run_watch
        self._sample_gpus()
        now = time.monotonic()
        pane = self.query_one("#run-panes", ContentSwitcher).current
        # What is not due yet stays owed: the change may be the last for a while.
        self.dirty = now < self._table_due or now < self._chart_due
        if now >= self._table_due:
            # Every rank's row changes with every step; redrawing 64 rows costs more than a
            # person reading them gains from more than two updates a second. The status line
            # and the errors change with them, and each change of a text relayouts the screen.
            self._table_due = now + TABLE_EVERY_S
            self._rank_table(watch.progress.ranks)
            self._update("#run-status", self._status())
            if pane == "errors":
                self._update("#errors-text", self._errors())
        chart = self.query_one(LossChart)
        if now >= self._chart_due or chart.log_scale != chart.drawn_log_scale:
            # A line plot is the costliest thing on the screen; a few times a second is plenty.
            self._chart_due = now + CHART_EVERY_S
            chart.show(watch.progress.ranks, self.chart_rank)
        if pane == "log":
            self._follow_log()
        elif pane == "gpus":
            self._update("#gpus-text", self._gpus())

    def _update(self, selector: str, text: Text) -> None:
        """Show ``text`` unless it is already on show: an update lays the whole screen out."""
        if self._shown_texts.get(selector) != text:
            self._shown_texts[selector] = text
            self.query_one(selector, Static).update(text)

    def _status(self) -> Text:
        record = self.record
        state = self.verdict.state if self.verdict is not None else record.state
        style = {RunState.FAILED: "bold red", RunState.COMPLETED: "bold green"}.get(state, "bold")
        text = Text.assemble((f"{state.value}", style), f"  attempt {self.run_watch.attempt}  ")
        text.append(f"{record.backend}, world size {record.world_size}  ")
        if self.verdict is not None:
            text.append(plain(self.verdict.detail, limit=200, one_line=True))
        else:
            text.append(plain(self.run_watch.progress.format_line(), limit=200, one_line=True))
            silent = [node for node in self.run_watch.nodes.values() if node.silent]
            if silent:
                names = ", ".join(plain(node.host, one_line=True) for node in silent)
                note = self.run_watch.silence_note(silent[0]) or ""
                text.append(
                    f"\n{names} not answering: {plain(note, limit=200, one_line=True)}", "red"
                )
        if self.note:
            text.append(f"\n{plain(self.note, limit=200, one_line=True)}", "italic")
        return text

    def _rank_table(self, ranks: list[RankProgress]) -> None:
        """Rows are updated cell by cell: rebuilding the table would throw away its render
        cache on every redraw, which costs more than everything else at 64 ranks."""
        table = self.query_one("#ranks", DataTable)
        silent = {node.host for node in self.run_watch.nodes.values() if node.silent}
        rows = {str(rank.rank): _rank_cells(rank, rank.host in silent) for rank in ranks}
        widths = [column.content_width for column in table.columns.values()]
        # An update in place keeps the column's width and would cut a wider value (a loss of
        # 0.008914 shown as "0.00"): laying the rows out again sizes the columns to them.
        wider = any(
            cell.cell_len > width
            for cells in rows.values()
            for cell, width in zip(cells, widths, strict=True)
        )
        if wider or list(rows) != list(self._rows):
            row = table.cursor_row
            table.clear()
            for key, cells in rows.items():
                table.add_row(*cells, key=key)
            if table.row_count:
                table.move_cursor(row=min(row, table.row_count - 1))
        else:
            for key, cells in rows.items():
                for column, (old, new) in enumerate(zip(self._rows[key], cells, strict=True)):
                    if old != new:
                        table.update_cell(key, self._columns[column], new)
        self._rows = rows

    def _errors(self) -> Text:
        diagnoses = self.run_watch.diagnoser.diagnoses()
        if not diagnoses:
            return Text("no errors", "green")
        text = Text()
        for index, diagnosis in enumerate(diagnoses):
            ranks = ", ".join(str(rank) for rank in diagnosis.ranks) or "torchrun"
            first = "first failure: " if index == 0 else ""
            text.append(f"✗ {first}{diagnosis.category.value}", "bold red" if index == 0 else "red")
            hosts = plain(", ".join(diagnosis.hosts), one_line=True)
            text.append(f"  rank {ranks} on {hosts}  ×{diagnosis.count}\n")
            text.append(f"  {plain(diagnosis.message, limit=300, one_line=True)}\n")
            if diagnosis.detail:
                text.append(f"  {plain(diagnosis.detail, limit=300, one_line=True)}\n")
            text.append(f"  cause: {diagnosis.cause}\n", "dim")
            text.append(f"  fix: {diagnosis.fix}\n", "bold")
        return text

    def _matches(self, line: RankLog) -> bool:
        return not self.log_filter or self.log_filter.lower() in line.text.lower()

    def _line(self, line: RankLog) -> Text:
        style = "red" if line.stream != "stdout" else ""
        return Text(f"[{line.rank}] {plain(line.text, limit=1000, one_line=True)}", style)

    def _rebuild_log(self) -> None:
        log = self.query_one("#log", RichLog)
        log.clear()
        self._last_log = None
        self._log_written = 0
        self._log_errors.clear()
        self._follow_log()

    def _follow_log(self) -> None:
        """Append the selected rank's lines since the last one shown (the tail is bounded)."""
        lines = self.run_watch.logs.get(self.log_rank)
        if not lines:
            return
        start = 0
        if self._last_log is not None:
            for index in range(len(lines) - 1, -1, -1):
                if lines[index] is self._last_log:
                    start = index + 1
                    break
        log = self.query_one("#log", RichLog)
        for line in list(lines)[start:]:
            if self._matches(line):
                log.write(self._line(line))
                if marks_error(line.text):
                    self._log_errors.append(self._log_written)
                self._log_written += 1
        self._last_log = lines[-1]

    def action_next_error(self, direction: int) -> None:
        """Scroll the log to the next (1) or previous (-1) line that marks an error, and stop
        following so that the next line to arrive does not scroll it away."""
        if self.query_one("#run-panes", ContentSwitcher).current != "log":
            self.action_pane("log")
        log = self.query_one("#log", RichLog)
        dropped = max(0, self._log_written - LOG_VIEW_LINES)
        rows = [number - dropped for number in self._log_errors if number >= dropped]
        if log.auto_scroll:
            # Following sits at the end: n starts from the first error, N from the last.
            target = (rows[0] if direction > 0 else rows[-1]) if rows else None
        elif direction > 0:
            target = next((row for row in rows if row > round(log.scroll_y)), None)
        else:
            target = next((row for row in reversed(rows) if row < round(log.scroll_y)), None)
        if target is None:
            where = "" if log.auto_scroll else " below" if direction > 0 else " above"
            self.say(f"no error{where} in rank {self.log_rank}'s log")
            return
        log.auto_scroll = False
        # After the next refresh: lines written just now have no place in the view before it.
        self.call_after_refresh(log.scroll_to, y=target, animate=False)
        self.say(f"rank {self.log_rank}'s log, line {target + 1}: following paused (f follows)")

    def action_follow_log(self) -> None:
        log = self.query_one("#log", RichLog)
        log.auto_scroll = True
        log.scroll_end(animate=False)

    def _sample_gpus(self) -> None:
        for host, node in self.run_watch.nodes.items():
            if node.sample is self._last_samples.get(host):
                continue
            self._last_samples[host] = node.sample
            for gpu in node.sample.get("gpus", ()):
                key = (host, int(gpu.get("index", 0)))
                util = gpu.get("utilization.gpu")
                if isinstance(util, (int, float)):
                    history = self._gpu_history.setdefault(key, deque(maxlen=GPU_HISTORY))
                    history.append(float(util))
                used, total = gpu.get("memory.used"), gpu.get("memory.total")
                if isinstance(used, (int, float)) and isinstance(total, (int, float)) and total:
                    memory = self._gpu_memory.setdefault(key, deque(maxlen=GPU_HISTORY))
                    memory.append(100.0 * used / total)

    def _gpus(self) -> Text:
        text = Text()
        for host, node in self.run_watch.nodes.items():
            sample = node.sample
            text.append(f"{plain(host, one_line=True)}", "bold")
            silence = self.run_watch.silence_note(node)
            if silence:
                text.append(f"  not answering: {plain(silence, one_line=True)}", "red")
            cpu, rss = sample.get("cpu_pct"), sample.get("rss_mib")
            if isinstance(cpu, (int, float)) and isinstance(rss, (int, float)):
                text.append(f"  cpu {cpu:.0f}%  rss {rss:.0f} MiB")
            text.append("\n")
            gpus = sample.get("gpus") or ()
            if not gpus:
                text.append("  no GPU samples\n", "dim")
            for gpu in gpus:
                index = int(gpu.get("index", 0))
                text.append(f"  GPU {index} ")
                used, total = gpu.get("memory.used"), gpu.get("memory.total")
                if isinstance(used, (int, float)) and isinstance(total, (int, float)):
                    text.append_text(bar(used, total, width=10))
                    text.append(f" {used:.0f}/{total:.0f} MiB")
                for key, unit in (("utilization.gpu", "%"), ("temperature.gpu", "°C")):
                    value = gpu.get(key)
                    if isinstance(value, (int, float)):
                        text.append(f"  {value:.0f}{unit}")
                power = gpu.get("power.draw")
                if isinstance(power, (int, float)):
                    text.append(f"  {power:.0f} W")
                history = self._gpu_history.get((host, index))
                if history:
                    text.append("  util " + _spark(history), "cyan")
                memory = self._gpu_memory.get((host, index))
                if memory:
                    text.append("  mem " + _spark(memory), "magenta")
                text.append("\n")
        return text


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
    style = {"failed": "bold red", "done": "green"}.get(rank.state.value, "")
    text = Text(rank.state.value, style)
    if silent:
        # Its host does not answer: no news is not a stall (the status line says more).
        text.append(" ⌁ no answer", "bold yellow")
    elif rank.stalled:
        text.append(" ⏸ stalled", "bold yellow")
    if rank.straggler:
        text.append(" ▼ straggler", "yellow")
    return text


def _spark(values: deque[float]) -> str:
    """Percentages as bars; a host's value outside 0–100 shows as the nearest end."""
    top = len(SPARK) - 1
    return "".join(SPARK[max(0, min(int(value / 100 * len(SPARK)), top))] for value in values)
