"""``?``: every key of the screen underneath, and how to come back to a run left going."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HOW_TO_COME_BACK = (
    "Quitting leaves a run going: come back with `ddptui` (the runs screen, R) or check it "
    "with `ddptui status`."
)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "dismiss", "close", priority=True)
    ]

    def __init__(self, keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        text = Text("Keys\n\n", style="bold")
        for key, description in self.keys:
            text.append(f"{key:>10}  ", style="bold")
            text.append(f"{description}\n")
        text.append(f"{':':>10}  ", style="bold")
        text.append("every action by name (also ctrl+p)\n\n")
        text.append(HOW_TO_COME_BACK)
        with VerticalScroll(id="help"):
            yield Static(text)
