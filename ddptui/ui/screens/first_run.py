"""No hosts file yet: offer to write a starter one (``ddptui init``) or to try the demo."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from ddptui.ui.messages import CloseConsole
from ddptui.untrusted import plain


class FirstRunScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("i", "init", "write a starter hosts file"),
        Binding("d", "demo", "the demo"),
        Binding("question_mark", "app.help", "help"),
    ]

    def __init__(self, path: Path, problem: str | None = None) -> None:
        super().__init__()
        self.path = path
        self.problem = problem

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="first-run"):
            yield Static(self._text(), id="first-run-text")
        yield Footer()

    def on_mount(self) -> None:
        self.title = "ddptui"
        self.sub_title = "welcome"

    def _text(self) -> Text:
        where = plain(str(self.path), one_line=True)
        text = Text("Welcome to ddptui\n\n", "bold")
        if self.problem is not None:
            text.append(f"{plain(self.problem)}\n\n", "red")
        else:
            text.append(f"There is no hosts file at {where} yet.\n\n")
        text.append("i", "bold")
        text.append(f"  write a commented starter hosts file to {where} (`ddptui init`);\n")
        text.append("   edit the addresses and paths, then run `ddptui trust` and come back.\n")
        text.append("d", "bold")
        text.append("  try the whole product on this machine, no GPU or SSH needed")
        text.append(" (`ddptui demo`).\n")
        text.append("q", "bold")
        text.append("  quit.\n")
        return text

    def action_init(self) -> None:
        from ddptui.config import starter_text

        if self.path.exists():
            self.notify(
                f"{self.path} exists already; not overwriting it", markup=False, severity="warning"
            )
            return
        self.path.write_text(starter_text(), encoding="utf-8")
        self.post_message(
            CloseConsole(
                f"wrote {self.path}: edit its hosts, then `ddptui trust {self.path}` "
                f"and `ddptui {self.path}`"
            )
        )

    def action_demo(self) -> None:
        self.post_message(CloseConsole("start the demo with `ddptui demo`"))
