"""The run screen's classified errors, first failure first, in the words ``ddptui status`` uses."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddptui.present.status import diagnosis_lines
from ddptui.run.diagnose import Diagnosis


class ErrorsPane(VerticalScroll):
    """Scrolls the errors' text (the ``Static`` ``#errors-text``)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._shown: Text | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="errors-text")

    def show(self, diagnoses: Sequence[Diagnosis]) -> None:
        """Show ``diagnoses`` (as the diagnoser orders them: the first failure's first)."""
        if diagnoses:
            text = Text("\n").join(
                line
                for index, diagnosis in enumerate(diagnoses)
                for line in diagnosis_lines(diagnosis, first=index == 0)
            )
        else:
            text = Text("no errors", "green")
        # An update lays the whole screen out again: only a change is worth one.
        if text != self._shown:
            self._shown = text
            self.query_one(Static).update(text)
