"""What the run's record says of its stragglers: each rank as it is named (by how much, since
when) and as it recovers, in the attempt's detail (``ddptui status``), a bounded number of
times an attempt."""

from __future__ import annotations

import time

from ddptui.run.following.progress import RunProgress

MAX_NOTES = 20
"""Notes an attempt's detail takes of stragglers: a rank that comes and goes all day would
otherwise grow the record without bound."""


class StragglerNotes:
    def __init__(self) -> None:
        self._attempt = 0
        self._named: set[int] = set()
        self._noted = 0

    def changes(self, attempt: int, progress: RunProgress) -> list[str]:
        """The lines to add to attempt ``attempt``'s detail for what changed since the last
        call: ranks named stragglers, ranks that are none any more."""
        if attempt != self._attempt:
            self._attempt, self._named, self._noted = attempt, set(), 0
        now = {
            straggler.rank: straggler
            for p in progress.ranks
            if (straggler := p.as_straggler()) is not None
        }
        lines = [
            f"straggler: {straggler.words()}"
            for rank, straggler in sorted(now.items())
            if rank not in self._named
        ]
        recovered = sorted(self._named - set(now))
        if recovered:
            at = time.strftime("%H:%M:%S")
            ranks = ", ".join(map(str, recovered))
            lines.append(f"rank {ranks} no longer a straggler at {at}")
        self._named = set(now)
        room = max(0, MAX_NOTES - self._noted)
        self._noted += min(room, len(lines))
        return lines[:room]
