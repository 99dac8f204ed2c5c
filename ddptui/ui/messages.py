"""Typed updates from the layers below to the screens, and from the screens to the app (what
the app holds changes by message, never by a screen writing the app's attributes).

Each kind can replace a pending one of its kind (Toolong's model): a flood of updates costs one
redraw, and screens redraw at most every :data:`REDRAW_S` on top of that.
"""

from __future__ import annotations

from textual.message import Message

from ddptui.config import Config
from ddptui.run.control import ClusterCheck
from ddptui.run.following.model import RunModel
from ddptui.run.record import RunRecord

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


class CheckFailed(Message):
    """The check could not be made (the scheduler did not answer): why."""

    def __init__(self, why: str) -> None:
        super().__init__()
        self.why = why


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


class ClusterRead(Message):
    """The health screen read the hosts file anew, or checked its cluster: what ``l`` launches
    on and with."""

    def __init__(self, config: Config, report: ClusterCheck | None) -> None:
        super().__init__()
        self.config = config
        self.report = report


class OpenRun(Message):
    """Show a run: attached while it runs, else as its files stand."""

    def __init__(self, record: RunRecord) -> None:
        super().__init__()
        self.record = record


class CloseConsole(Message):
    """End the console, saying ``goodbye`` on the terminal it leaves."""

    def __init__(self, goodbye: str) -> None:
        super().__init__()
        self.goodbye = goodbye
