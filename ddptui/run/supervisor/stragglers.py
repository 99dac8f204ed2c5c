"""The attempt's stragglers as the supervisor judges them, and what the run's record says of
them: each rank as it is named (by how much, since when) and as it recovers, in the attempt's
detail (``ddptui status``), a bounded number of times an attempt.

Which ranks are slow is :func:`~.judging.slow_ranks`'s to say; whether one between the
thresholds is still named depends on what it said last, which is kept here, so that the
record's notes and the judgement every viewer is sent (:meth:`StragglerNotes.named`) name the
same ranks."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping

from ddptui.run.following.progress import RunProgress
from ddptui.run.following.state import NodeState, Straggler
from ddptui.run.supervisor import judging

MAX_NOTES = 20
"""Notes an attempt's detail takes of stragglers: a rank that comes and goes all day would
otherwise grow the record without bound."""


class StragglerNotes:
    def __init__(self) -> None:
        self._attempt = 0
        self._slow: dict[int, judging.Slow] = {}
        self._named: tuple[Straggler, ...] = ()
        self._noted = 0

    def named(self, attempt: int) -> tuple[Straggler, ...]:
        """The ranks named stragglers in attempt ``attempt`` at the latest :meth:`changes`,
        slowest first; none in an attempt not judged yet."""
        return self._named if attempt == self._attempt else ()

    def changes(
        self, attempt: int, progress: RunProgress, nodes: Mapping[str, NodeState] | None = None
    ) -> list[str]:
        """Judge attempt ``attempt``'s stragglers from its ranks' ``progress``, each with what
        its host's heartbeats say slows its GPU (``nodes``: the attempt's, by host); the lines
        to add to its detail for what changed since the last call: ranks named stragglers or
        slowed by a new cause, ranks that are none any more."""
        if attempt != self._attempt:
            self._attempt, self._slow, self._named, self._noted = attempt, {}, (), 0
        was = {straggler.rank: straggler.cause for straggler in self._named}
        self._slow = judging.slow_ranks(progress, self._slow)
        self._named = tuple(
            dataclasses.replace(straggler, cause=_cause(straggler, nodes or {}))
            for straggler in judging.stragglers(self._slow)
        )
        now = {straggler.rank: straggler for straggler in self._named}
        lines = [
            f"straggler: {straggler.words()}"
            for rank, straggler in sorted(now.items())
            if rank not in was or (straggler.cause and straggler.cause != was[rank])
        ]
        recovered = sorted(set(was) - set(now))
        if recovered:
            at = time.strftime("%H:%M:%S")
            ranks = ", ".join(map(str, recovered))
            lines.append(f"rank {ranks} no longer a straggler at {at}")
        room = max(0, MAX_NOTES - self._noted)
        self._noted += min(room, len(lines))
        return lines[:room]


def _cause(straggler: Straggler, nodes: Mapping[str, NodeState]) -> str:
    node = nodes.get(straggler.host)
    return node.slowed_cause(straggler.rank) if node is not None else ""
