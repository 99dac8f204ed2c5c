"""Typed updates from the layers below to the screens.

Each kind can replace a pending one of its kind (Toolong's model): a flood of updates costs one
redraw, and screens redraw at most every :data:`REDRAW_S` on top of that.
"""

from __future__ import annotations

from textual.message import Message

from ddptui.run.control import ClusterCheck
from ddptui.run.model import RunModel

REDRAW_S = 0.1
"""About ten redraws a second at most, whatever the rate of updates."""


class CheckProgress(Message):
    """One host's check moved on (``event`` as :meth:`ddptui.run.control.RunControl.check`
    says it)."""

    def __init__(self, host: str, event: str) -> None:
        super().__init__()
        self.host = host
        self.event = event


class CheckDone(Message):
    def __init__(self, report: ClusterCheck) -> None:
        super().__init__()
        self.report = report


class RunChanged(Message):
    """The followed run's state moved on; the newest replaces any still pending."""

    def __init__(self, model: RunModel) -> None:
        super().__init__()
        self.model = model

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RunChanged) and message.model is self.model


class RunEnded(Message):
    """The followed attempt ended and its supervisor recorded how (or following it stopped)."""


class Said(Message):
    """A line from a service's ``say`` (launch, stop, resume steps)."""

    def __init__(self, line: str) -> None:
        super().__init__()
        self.line = line
