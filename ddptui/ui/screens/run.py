"""The run screen: every rank's progress, the loss chart, the classified errors, each rank's
log (following, filterable with ``/``), each node's GPUs, the launch timeline (``t``) and the
ranks' stacks (``D``); stop, kill and resume keys.

A live run's screen is attached to its supervisor (an
:class:`~ddptui.run.control.Attachment`): updates arrive as :class:`RunChanged` messages (the
newest replaces those pending), the screen redraws at most every :data:`REDRAW_S`, only the pane
on show, and its keys are requests to the supervisor. A finished run's is read from its hosts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import ContentSwitcher, DataTable, Footer, Header, Input, Static

from ddptui.errors import DdptuiError
from ddptui.present.status import incident_line, progress_line, state_line
from ddptui.run.control import Attachment, ControlError, RunControl
from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Judgement
from ddptui.run.protocol import Said as Told
from ddptui.run.record import RunRecord, RunState
from ddptui.ui.messages import REDRAW_S, RunChanged, RunEnded, Said
from ddptui.ui.widgets.errors_pane import ErrorsPane
from ddptui.ui.widgets.gpu_pane import GpuPane
from ddptui.ui.widgets.launch_pane import LaunchPane
from ddptui.ui.widgets.log_pane import LogPane
from ddptui.ui.widgets.loss_chart import LossChart
from ddptui.ui.widgets.rank_table import RankTable
from ddptui.ui.widgets.stacks_pane import StacksPane
from ddptui.untrusted import plain

if TYPE_CHECKING:
    from ddptui.run.control import StackDump

CHART_EVERY_S = 0.5
TABLE_EVERY_S = 0.5
GROUPED_TABLE_EVERY_S = 1.0
"""A row per node (past 64 ranks): each row sums 8 ranks that all step at once, and at 1,024
ranks the table's redraw was the console's largest cost (11.6% of a core at two a second, 8.5%
at one); ``top`` redraws as seldom."""

KillNode = Callable[[RunRecord], str]
"""``ddptui demo``'s fault for recovery to heal: kill one node's ranks of the run, and say what
was done."""


class RunScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        # The footer shows what fits: help first, so that it is never the part cut off; the
        # rest is in help and the command palette.
        Binding("question_mark", "app.help", "help"),
        # Only in `ddptui demo --spare` (check_action); second, so that a newcomer sees it
        # whatever the width.
        Binding("x", "demo_kill", "kill a node"),
        Binding("s", "stop", "stop"),
        Binding("K", "kill", "kill", show=False),
        Binding("r", "resume", "resume"),
        Binding("slash", "filter", "filter log", show=False),
        Binding("n", "next_error(1)", "next error", show=False),
        Binding("N", "next_error(-1)", "previous error", show=False),
        Binding("f", "follow_log", "follow log", show=False),
        Binding("e", "pane('errors')", "errors"),
        Binding("o", "pane('log')", "log"),
        Binding("g", "pane('gpus')", "GPUs"),
        Binding("t", "pane('launch')", "launch timeline", show=False),
        Binding("y", "log_scale", "scale"),
        Binding("a", "all_ranks", "all ranks", show=False),
        Binding("w", "worst", "worst node", show=False),
        Binding("D", "dump", "every rank's stacks", show=False),
        Binding("escape", "back", "back"),
    ]

    def __init__(
        self,
        record: RunRecord,
        *,
        control: RunControl | None = None,
        attachment: Attachment | None = None,
        model: RunModel | None = None,
        demo_kill: KillNode | None = None,
    ) -> None:
        """``attachment``: follow a live run; ``control`` alone: read a finished run back from
        its hosts; neither: show ``model`` as it is (tests, screenshots). ``demo_kill``: the
        demo's, behind the key that kills a node."""
        super().__init__()
        self.demo_kill = demo_kill
        self.record = record
        self.control = control
        self.attachment = attachment
        self.run_model = attachment.model if attachment is not None else model or RunModel(record)
        self.following = False
        self.dirty = True
        self.note = ""
        self.log_rank = 0
        self.chart_rank: int | None = None
        self.log_filter = ""
        self.stacks: StackDump | None = None
        """The last stack dump taken from this screen (``D``)."""
        self._chart_due = self._table_due = 0.0
        self._shown_status: Text | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="run-status")
        with Horizontal(id="run-top"):
            yield RankTable(id="ranks", cursor_type="row", zebra_stripes=True)
            yield LossChart(id="loss")
        with ContentSwitcher(id="run-panes", initial="errors"):
            yield ErrorsPane(id="errors")
            yield LogPane(id="log")
            yield GpuPane(id="gpus")
            yield LaunchPane(id="launch")
            yield StacksPane(id="stacks")
        yield Input(placeholder="filter the log (enter keeps it, esc clears)", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        self.title = "ddptui"
        record = self.record
        self.sub_title = f"run {record.id} · {record.backend}, world size {record.world_size}"
        self.query_one("#filter", Input).display = False
        self.set_interval(REDRAW_S, self._redraw)
        self._redraw()
        if self.attachment is not None:
            self._follow(self.attachment)
        elif self.control is not None:
            self._read_back(self.control)

    def on_rank_table_resized(self) -> None:
        self._table_due = 0.0
        self.dirty = True
        # After the layout that resized it: redrawn within it, the new columns come out cut.
        self.call_after_refresh(self._redraw)

    def on_rank_table_scrolled(self) -> None:
        # Rows the table kept with their last figures while out of view: brought up to date.
        self._table_due = 0.0
        self.dirty = True

    def on_unmount(self) -> None:
        if self.attachment is not None:
            self.app.run_worker(self.attachment.close(), group="detach")

    # --- following -------------------------------------------------------------------------

    @work(exclusive=True, group="follow")
    async def _follow(self, attachment: Attachment) -> None:
        self.following = True
        try:
            async for item in attachment.updates():
                self.record = attachment.record
                if isinstance(item, Told):
                    self.say(item.line)
                if attachment.over(item):
                    break
                # Once a read: a message for each of thousands of lines a second cost the
                # console more at 4,096 ranks than drawing them.
                if attachment.burst_taken:
                    self.post_message(RunChanged(attachment.model))
        finally:
            self.following = False
        self.record = attachment.record
        self.post_message(RunEnded())

    @work(exclusive=True, group="follow")
    async def _read_back(self, control: RunControl) -> None:
        """A finished run: its files as they stand on the hosts (logs, losses, errors)."""
        self.say(f"reading run {self.record.id}'s files on its hosts…")
        _, config = control.open(self.record.id)
        self.run_model = await control.read_back(self.record, config)
        self.query_one(RankTable).lay_out_again()
        self._chart_due = self._table_due = 0.0
        self.say(f"run {self.record.id} {self.record.state.value}: as its files stand")

    def on_run_changed(self, message: RunChanged) -> None:
        self.dirty = True

    def on_run_ended(self, message: RunEnded) -> None:
        self._table_due = 0.0
        self.dirty = True

    def on_said(self, message: Said) -> None:
        self.note = message.line
        self._table_due = 0.0
        self.dirty = True

    def say(self, line: str) -> None:
        self.post_message(Said(line))

    @property
    def judgement(self) -> Judgement:
        """What the run's supervisor says of it; without one (a finished run read back, a
        recorded one), what the lines at hand say."""
        if self.attachment is not None:
            return self.attachment.judgement
        return self.run_model.judgement(self.record)

    @property
    def running(self) -> bool:
        """The run goes on (as far as its supervisor says)."""
        return not self.judgement.state.final

    # --- keys ------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "demo_kill":
            return self.demo_kill is not None
        return True

    def action_stop(self) -> None:
        self._stop(kill=False)

    def action_kill(self) -> None:
        self._stop(kill=True)

    @work(exclusive=True, group="act")
    async def _stop(self, kill: bool) -> None:
        from ddptui.ui.screens.confirm import ConfirmScreen

        if self.control is None:
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
        try:
            if self.attachment is not None and self.following:
                reply = await self.attachment.request(verb)
            else:
                reply = await self.control.stop(self.record.id, kill=kill, say=self.say)
        except ControlError as error:
            self.say(str(error))
            return
        self.say(reply.message)

    @work(exclusive=True, group="act")
    async def action_resume(self) -> None:
        if self.control is None:
            return
        if self.running:
            self.say("the run is still going: stop it (s) before resuming")
            return
        try:
            attachment = await self.control.resume(self.record.id, say=self.say)
        except ControlError as error:
            self.say(str(error))
            return
        if self.attachment is not None:
            await self.attachment.close()
        self.attachment = attachment
        self.record = attachment.record
        self.run_model = attachment.model
        self.query_one(RankTable).lay_out_again()
        self._restart_log()
        self.say(f"run {self.record.id} resumed (attempt {attachment.judgement.attempt})")
        self._follow(attachment)

    @work(exclusive=True, group="demo")
    async def action_demo_kill(self) -> None:
        kill = self.demo_kill
        if kill is None:
            return
        state = self.judgement.state
        if state in (RunState.RUNNING, RunState.HUNG):
            # A walk over every process of this machine: not on the console's loop.
            said = await asyncio.to_thread(kill, self.record)
        else:
            said = f"run {self.record.id} is {state.value}: it has no ranks running to kill"
        # A toast, not the status's note: narrower than 120 columns, or under an incident, the
        # note is past the status's three lines.
        self.notify(plain(said, limit=200, one_line=True), markup=False, timeout=10)

    @work(exclusive=True, group="dump")
    async def action_dump(self) -> None:
        if self.control is None or not self.running:
            self.say("no rank of this run is running: there are no stacks to take")
            return
        self.say(f"asking every rank of run {self.record.id} for its stacks…")
        try:
            self.stacks = await self.control.dump(self.record.id)
        except DdptuiError as error:
            # Its supervisor's refusal, or a kept dump it could not read back.
            self.say(plain(str(error), one_line=True))
            return
        self.query_one(StacksPane).show(self.stacks)
        self.action_pane("stacks")
        groups = len(self.stacks.groups)
        self.say(f"stacks of {len(self.stacks.stacks)} rank(s), {groups} different")

    def action_filter(self) -> None:
        self.query_one("#run-panes", ContentSwitcher).current = "log"
        field = self.query_one("#filter", Input)
        field.display = True
        field.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.log_filter = event.value
        self._restart_log()

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
            self._restart_log()

    def action_next_error(self, direction: int) -> None:
        if self.query_one("#run-panes", ContentSwitcher).current != "log":
            self.action_pane("log")
        self.say(self.query_one(LogPane).next_error(direction))

    def action_follow_log(self) -> None:
        self.query_one(LogPane).follow_again()

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
        table = self.query_one(RankTable)
        rank = table.rank_at(event.cursor_row)
        if rank is None:
            node = table.node_at(event.cursor_row)
            if node is not None:
                table.toggle(node)
                self._redraw_table()
            return
        pane = self.query_one("#run-panes", ContentSwitcher).current
        if pane == "stacks" and self.stacks is not None:
            self.query_one(StacksPane).show(self.stacks, rank)
            return
        self.chart_rank = self.log_rank = rank
        self._chart_due = 0.0
        self.action_pane("log")

    def action_worst(self) -> None:
        """The cursor to the worst node's row (expanded) or the worst rank's."""
        table = self.query_one(RankTable)
        worst = table.worst()
        if worst is None:
            self.say("nothing is wrong with any rank")
            return
        row, words = worst
        node = table.node_at(row)
        if table.grouped and node is not None and node not in table.expanded:
            table.toggle(node)
            self._redraw_table()
        table.move_cursor(row=row)
        table.focus()
        self.say(f"worst: {words}")

    # --- drawing ---------------------------------------------------------------------------

    def _redraw_table(self) -> None:
        """Now, not at the next tick: the rows a key asked for are there for the next key."""
        self._table_due = 0.0
        self.dirty = True
        self._redraw()

    def _redraw(self) -> None:
        if not self.dirty or not self.is_current:
            return
        model = self.run_model
        gpus = self.query_one(GpuPane)
        gpus.sample(model.nodes)
        now = time.monotonic()
        pane = self.query_one("#run-panes", ContentSwitcher).current
        # What is not due yet stays owed: the change may be the last for a while.
        self.dirty = now < self._table_due or now < self._chart_due
        table = self.query_one(RankTable)
        if now >= self._table_due:
            # Every rank's row changes with every step; redrawing 64 rows costs more than a
            # person reading them gains from more than two updates a second. The status line
            # and the errors change with them, and each change of a text relayouts the screen.
            self._table_due = now + (GROUPED_TABLE_EVERY_S if table.grouped else TABLE_EVERY_S)
            table.show(model.progress.ranks, self.judgement)
            self._show_status()
            diagnoses = model.diagnoses()
            if pane == "errors":
                self.query_one(ErrorsPane).show(diagnoses)
            # An errors pane with none to show is one line: the chart takes the room.
            self.query_one("#run-panes").set_class(pane == "errors" and not diagnoses, "quiet")
        chart = self.query_one(LossChart)
        if now >= self._chart_due or chart.log_scale != chart.drawn_log_scale:
            # A line plot is the costliest thing on the screen; a few times a second is plenty.
            # A row a node, with the table: a frame paints every line from the highest change
            # to the lowest, so the chart drawn apart repainted the table's lines as well (at
            # 512 nodes, most of the console's drawing).
            self._chart_due = self._table_due if table.grouped else now + CHART_EVERY_S
            chart.show(model.progress.ranks, self.chart_rank, model.bands.points())
        if pane == "log":
            self.query_one(LogPane).follow(model.logs.get(self.log_rank, ()))
        elif pane == "gpus":
            gpus.show(model.nodes, self.judgement.notes)
        elif pane == "launch":
            hosts = [node.host for node in model.record.nodes]
            self.query_one(LaunchPane).show(model.timeline(), hosts, model.attempt)

    def _show_status(self) -> None:
        text = self._status()
        # An update lays the whole screen out again: only a change is worth one.
        if text != self._shown_status:
            self._shown_status = text
            self.query_one("#run-status", Static).update(text)

    def _status(self) -> Text:
        judgement = self.judgement
        text = state_line(self.record, judgement)
        progress = progress_line(judgement.state, judgement.progress, stepped=judgement.stepped)
        if progress is not None:
            text.append("\n")
            text.append_text(progress)
        for host, note in judgement.notes.items():
            said = plain(note, limit=200, one_line=True)
            text.append(f"\n{plain(host, one_line=True)} not answering: {said}", "red")
        if self.record.incidents:
            # The latest only: `ddptui status` lists them all.
            text.append("\n")
            text.append_text(incident_line(self.record.incidents[-1]))
        if self.note:
            text.append(f"\n{plain(self.note, limit=200, one_line=True)}", "italic")
        return text

    def _restart_log(self) -> None:
        lines = self.run_model.logs.get(self.log_rank, ())
        self.query_one(LogPane).show(lines, rank=self.log_rank, pattern=self.log_filter)
