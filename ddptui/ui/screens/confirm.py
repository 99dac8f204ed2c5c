"""A yes/no question over the current screen; ``y`` or enter confirms, ``n`` or esc declines."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y,enter", "answer(True)", "yes", priority=True),
        Binding("n,escape", "answer(False)", "no", priority=True),
    ]

    def __init__(self, title: str, body: Text, question: str) -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(Text(self.title_text, style="bold"), id="confirm-title")
            # The question before the details: a long plan scrolls, the question stays in view.
            yield Static(Text(f"{self.question}  [y/N]", style="bold"), id="confirm-question")
            with VerticalScroll(id="confirm-body"):
                yield Static(self.body)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
