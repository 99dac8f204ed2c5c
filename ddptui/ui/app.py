"""The console app and its entry point, :func:`run_console`.

The app holds what the screens share (the hosts file, the last check report, the run store)
and the actions every screen offers: launch, runs, help, quit. Quitting while a run goes on
leaves it going and says how to come back.
"""

from __future__ import annotations

import gc
import shlex
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from ddptui.config import Config
from ddptui.errors import DdptuiError
from ddptui.present.check import error_count
from ddptui.present.plan import launch_heading, plan_text
from ddptui.run.control import Attachment, ClusterCheck, RunControl
from ddptui.run.record import RunRecord
from ddptui.run.store import RunStore
from ddptui.untrusted import plain

if TYPE_CHECKING:
    from ddptui.ui.messages import CloseConsole, ClusterRead, OpenRun
    from ddptui.ui.screens.run import KillNode

DEFAULT_HOSTS = Path("hosts.toml")
NOTE_LIMIT = 300
"""Characters of a notification that quotes a host or the supervisor: a toast, not a log."""


class DdptuiApp(App[int]):
    CSS_PATH = "ddptui.tcss"
    TITLE = "ddptui"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("colon", "command_palette", "actions", show=False),
    ]

    def __init__(
        self,
        config_path: Path | None = None,
        *,
        store: RunStore | None = None,
        demo_note: str | None = None,
        demo_kill: KillNode | None = None,
        first_screen: Screen[None] | None = None,
    ) -> None:
        """``first_screen``: the first screen, instead of the hosts file's health screen (tests).
        ``demo_kill``: the demo's, for the run screen's key that kills a node."""
        super().__init__()
        self.config_path = config_path or DEFAULT_HOSTS
        self.config: Config | None = None
        self.report: ClusterCheck | None = None
        self.control = RunControl(store or RunStore())
        self.demo_note = demo_note
        self.demo_kill = demo_kill
        self.first_screen = first_screen
        self.goodbye: str | None = None
        """What the terminal shows after the console closes."""

    def on_mount(self) -> None:
        # Startup's objects (modules, widgets, styles) live as long as the console: left to the
        # collector, each full collection walks them all again, a pause of ~100 ms during a run.
        self.call_after_refresh(gc.freeze)
        if self.first_screen is not None:
            self.push_screen(self.first_screen)
            return
        from ddptui.config import load_config
        from ddptui.errors import ConfigError
        from ddptui.ui.screens.first_run import FirstRunScreen
        from ddptui.ui.screens.health import HealthScreen

        if not self.config_path.exists():
            self.push_screen(FirstRunScreen(self.config_path))
            return
        try:
            self.config = load_config(self.config_path)
        except ConfigError as error:
            self.push_screen(FirstRunScreen(self.config_path, problem=str(error)))
            return
        # The demo's note stays on the health screen's status line: a notification would
        # cover the findings at 80×24.
        self.push_screen(HealthScreen(self.config, note=self.demo_note))

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        # Every key the screen offers, by name, in the command palette (`:` or ctrl+p).
        seen = set()
        for key, active in screen.active_bindings.items():
            binding = active.binding
            if not binding.description or binding.action in seen:
                continue
            seen.add(binding.action)
            yield SystemCommand(
                binding.description,
                f"key: {key}",
                lambda node=active.node, action=binding.action: self.run_action(action, node),
            )
        yield from super().get_system_commands(screen)

    # --- shared actions --------------------------------------------------------------------

    def action_help(self) -> None:
        from ddptui.ui.screens.help import HelpScreen

        # The screen's and the app's own keys, those too minor for the footer included; a
        # focused widget's (cursor keys) go without saying, and the help names ':' itself.
        keys = [
            (self.get_key_display(active.binding), active.binding.description)
            for active in self.screen.active_bindings.values()
            if active.node in (self, self.screen)
            and active.binding.description
            and active.binding.action != "command_palette"
        ]
        self.push_screen(HelpScreen(keys))

    def action_runs(self) -> None:
        from ddptui.ui.screens.runs import RunsScreen

        self.push_screen(RunsScreen(self.control))

    def on_cluster_read(self, message: ClusterRead) -> None:
        self.config, self.report = message.config, message.report

    def on_open_run(self, message: OpenRun) -> None:
        self.open_run(message.record)

    def on_close_console(self, message: CloseConsole) -> None:
        self.goodbye = message.goodbye
        self.exit(message=message.goodbye)

    @work(exclusive=True, group="open")
    async def open_run(self, record: RunRecord) -> None:
        """Show ``record``: attached to its supervisor while it runs, else as its files on the
        hosts stand."""
        from ddptui.run.control import ControlError
        from ddptui.ui.screens.run import RunScreen

        if record.state.final:
            self.push_screen(RunScreen(record, control=self.control, demo_kill=self.demo_kill))
            return
        try:
            attachment = await self.control.attach(record.id, say=self._say)
        except ControlError as error:
            self._fail(error)
            return
        self._follow_run(attachment)

    def _follow_run(self, attachment: Attachment) -> None:
        from ddptui.ui.screens.run import RunScreen

        screen = RunScreen(
            attachment.record, control=self.control, attachment=attachment, demo_kill=self.demo_kill
        )
        self.push_screen(screen)

    def _say(self, line: str) -> None:
        self.notify(plain(line, limit=NOTE_LIMIT, one_line=True), markup=False)

    def _fail(self, error: Exception) -> None:
        self.notify(
            plain(str(error), limit=NOTE_LIMIT, one_line=True),
            markup=False,
            severity="error",
            timeout=30,
        )

    @work(exclusive=True, group="launch")
    async def action_launch(self) -> None:
        from ddptui.run.control import CodeError, ControlError, PlanError
        from ddptui.ui.screens.confirm import ConfirmScreen

        config = self.config
        if config is None:
            return
        if self.report is None:
            self.notify("checking the cluster before launching…")
            try:
                self.report = await self.control.check(config)
            except DdptuiError as error:
                self._fail(error)
                return
        report = self.report
        try:
            plan = self.control.plan(config, report)
            code = self.control.code(config)
        except (PlanError, CodeError) as error:
            # A host's facts can make a plan impossible (a workdir it reports as relative):
            # that is said, it does not end the console.
            self._fail(error)
            return
        body = Text()
        errors = error_count(report)
        if errors:
            body.append(f"The check found {errors} error(s); launching anyway.\n\n", "red")
        body.append(launch_heading(plan) + "\n\n", "bold")
        body.append(plan_text(plan, code, listed=5))
        confirm = ConfirmScreen(
            "launch", body, "launch this run?", field="extra arguments, after [job] args"
        )
        if not await self.push_screen_wait(confirm):
            return
        # The check was done before anyone asked: the launch's time starts at the yes.
        asked = time.time()
        if confirm.text.strip():
            try:
                plan = self.control.plan(config, report, extra_args=shlex.split(confirm.text))
            except (ValueError, PlanError) as error:
                self._fail(error)
                return
        try:
            # Only `ddptui demo` opens the console with a note: its runs are marked so.
            attachment = await self.control.launch(
                config, report, plan, demo=self.demo_note is not None, say=self._say, began=asked
            )
        except ControlError as error:
            self._fail(error)
            return
        self._follow_run(attachment)

    async def action_quit(self) -> None:
        from ddptui.ui.screens.run import RunScreen

        going = [s for s in self.screen_stack if isinstance(s, RunScreen) and s.running]
        # The demo ends its runs with its hosts, and says so itself.
        if going and self.demo_note is None:
            run = going[-1].record.id
            self.goodbye = (
                f"run {run} goes on. Come back with `ddptui` (R: runs) or check it with "
                f"`ddptui status {run}`; stop it with `ddptui stop {run}`"
            )
        self.exit(0, message=self.goodbye)


def run_console(
    config_path: Path | None, *, demo_note: str | None = None, demo_kill: KillNode | None = None
) -> int:
    """Open the console on ``config_path`` (default ./hosts.toml); its exit code.

    ``demo_note`` is shown once at the start (the demo says what it set up); ``demo_kill``
    (the demo's too) puts a key on the run screen that kills a node."""
    app = DdptuiApp(config_path, demo_note=demo_note, demo_kill=demo_kill)
    return app.run() or 0
