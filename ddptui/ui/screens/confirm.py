"""A yes/no question over the current screen; ``y`` or enter confirms, ``n`` or esc declines.

With a ``field``, one line of text goes with the answer (a launch's extra arguments): ``a``
edits it, enter in it confirms, esc leaves it."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class ConfirmScreen(ModalScreen[bool]):
    # Not priority bindings: while the field is edited, its keys are letters.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y,enter", "answer(True)", "yes"),
        Binding("n", "answer(False)", "no"),
        Binding("escape", "leave", "no", show=False),
        Binding("a", "edit_field", "edit", show=False),
    ]

    def __init__(self, title: str, body: Text, question: str, *, field: str | None = None) -> None:
        """``field``: what the line of text is for (its placeholder); none by default."""
        super().__init__()
        self.title_text = title
        self.body = body
        self.question = question
        self.field = field

    @property
    def text(self) -> str:
        """The field's line as it was confirmed ("" without a field)."""
        return self.query_one(Input).value if self.field is not None else ""

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(Text(self.title_text, style="bold"), id="confirm-title")
            # The question before the details: a long plan scrolls, the question stays in view.
            yield Static(Text(f"{self.question}  [y/N]", style="bold"), id="confirm-question")
            if self.field is not None:
                field = Input(placeholder=f"{self.field} (a: edit)", id="confirm-field")
                # The question is answered with a key: nothing is typed until `a`.
                field.can_focus = False
                yield field
            with VerticalScroll(id="confirm-body"):
                yield Static(self.body)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    def action_edit_field(self) -> None:
        if self.field is not None:
            field = self.query_one(Input)
            field.can_focus = True
            field.focus()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.dismiss(True)

    def action_leave(self) -> None:
        # Esc in the field leaves it; outside it, it declines.
        if isinstance(self.focused, Input):
            self.set_focus(None)
        else:
            self.dismiss(False)
