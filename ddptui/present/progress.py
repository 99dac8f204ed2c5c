"""What following a run from the command line prints: a progress line at most every 2 s, and
each change once — a node's (not answering, answering again, torchrun's exit), the run's state
(hung, stepping again) and each newly classified error with its cause and fix."""

from __future__ import annotations

import time
from collections.abc import Callable

from ddptui.present.status import diagnosis_lines, progress_line
from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Judgement
from ddptui.run.record import RunState
from ddptui.untrusted import plain

PROGRESS_EVERY_S = 2.0
LOOK_EVERY_S = 0.25


class ProgressReport:
    """Turns a followed run's state into the lines not said yet."""

    def __init__(
        self, every_s: float = PROGRESS_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.every_s = every_s
        self._clock = clock
        self._next = 0.0
        self._diagnoses: set[tuple[str, str]] = set()
        self._nodes: dict[str, str] = {}
        self._state: RunState | None = None
        self._looked = -LOOK_EVERY_S
        self._judged: Judgement | None = None
        self._progress = ""

    def lines(self, model: RunModel, judgement: Judgement, *, final: bool = False) -> list[str]:
        """What is new since the last call; nothing when called again within ``LOOK_EVERY_S``
        and the judgement has not changed (it is called for every line a run writes)."""
        now = self._clock()
        if not final and judgement is self._judged and now < self._looked + LOOK_EVERY_S:
            return []
        self._looked, self._judged = now, judgement
        said: list[str] = []
        if self._state is not None and judgement.state is not self._state:
            if judgement.state is RunState.HUNG:
                said.append(f"hung: {plain(judgement.detail, limit=400, one_line=True)}")
            elif self._state is RunState.HUNG and judgement.state is RunState.RUNNING:
                said.append("stepping again")
        self._state = judgement.state
        for node in model.nodes.values():
            note = judgement.notes.get(node.host)
            what = f"not answering: {plain(note, limit=300, one_line=True)}" if note else ""
            if node.exit is not None:
                what = f"torchrun exited {node.exit}"
            elif not what and self._nodes.get(node.host, "").startswith("not answering"):
                what = "answering again"
            if what and self._nodes.get(node.host) != what:
                self._nodes[node.host] = what
                said.append(f"{plain(node.host, one_line=True)}: {what}")
        for diagnosis in model.diagnoses():
            key = (diagnosis.category.value, diagnosis.message)
            if key not in self._diagnoses:
                self._diagnoses.add(key)
                said += [line.plain for line in diagnosis_lines(diagnosis, first=False)]
        if final or now >= self._next:
            self._next = now + self.every_s
            progress = progress_line(judgement.state, judgement.progress, stepped=judgement.stepped)
            # The last word once the run ended, unless it was just said: a node's exit makes
            # the line before it say the same.
            if progress is not None and not (final and progress.plain == self._progress):
                said.append(progress.plain)
                self._progress = progress.plain
        return said
