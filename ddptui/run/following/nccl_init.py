"""NCCL's own account of a communicator's start, where it gives one: from 2.23 on, with
``NCCL_DEBUG=INFO`` (``ddptui launch --debug``), each rank prints

    NCCL INFO Init timings - ncclCommInitRankConfig: rank 0 nranks 16 total 0.35 (kernels 0.34,
    alloc 0.00, bootstrap 0.00, allgathers 0.00, topo 0.00, graphs 0.00, connections 0.01,
    rest 0.00)

once its communicator is up. Pure: the line is a rank's output, so the host's word, read with
bounds (names of letters, at most :data:`MAX_PARTS` parts, numbers finite and below a day) and
shown as plain text. The launch timeline keeps each host's slowest rank's
(:class:`~ddptui.run.timeline.Timeline`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

_LINE = re.compile(
    r"Init timings\s*-\s*ncclCommInitRank\w{0,32}:\s*rank (\d{1,7}) nranks (\d{1,7}) "
    r"total (\d{1,9}(?:\.\d{1,9})?) \(([^()]{0,600})\)"
)
_NAME = r"[a-z][a-z_]{0,23}"
_PART = re.compile(rf"({_NAME}) (\d{{1,9}}(?:\.\d{{1,9}})?)")
MAX_PARTS = 16
MAX_SECONDS = 86400.0
MARK = "Init timings"
"""What a line must hold to be worth the expression (most lines of a rank do not)."""


@dataclass(frozen=True)
class NcclInit:
    """A communicator's start on one rank, as NCCL timed it."""

    rank: int
    total_s: float
    parts: tuple[tuple[str, float], ...] = ()
    """Each part NCCL named and its seconds, in NCCL's order."""

    def words(self, where: str = "") -> str:
        """``NCCL init 0.35 s (kernels 0.34, connections 0.01)``: the total and the parts that
        took most of it (``where``: after the total, ``on node2 rank 5``)."""
        line = f"NCCL init {self.total_s:.2f} s" + (f" {where}" if where else "")
        largest = sorted(
            (part for part in self.parts if part[1] >= 0.01), key=lambda p: p[1], reverse=True
        )[:2]
        if largest:
            line += " (" + ", ".join(f"{name} {seconds:.2f}" for name, seconds in largest) + ")"
        return line

    def to_document(self) -> dict[str, Any]:
        return {"rank": self.rank, "total_s": self.total_s, "parts": dict(self.parts)}

    def to_json(self) -> dict[str, Any]:
        """The ``status --json`` form (docs/events.md, "The launch timeline")."""
        return {
            "rank": self.rank,
            "total_s": round(self.total_s, 3),
            "parts": {name: round(seconds, 3) for name, seconds in self.parts},
            "words": self.words(),
        }

    @classmethod
    def from_document(cls, data: object) -> NcclInit | None:
        """The record's form back; None when it is not one."""
        if not isinstance(data, dict):
            return None
        rank, total, parts = data.get("rank"), data.get("total_s"), data.get("parts", {})
        if type(rank) is not int or rank < 0 or not _seconds(total) or not isinstance(parts, dict):
            return None
        kept = tuple(
            (name, float(seconds))
            for name, seconds in list(parts.items())[:MAX_PARTS]
            if isinstance(name, str) and re.fullmatch(_NAME, name) and _seconds(seconds)
        )
        assert isinstance(total, int | float)
        return cls(rank, float(total), kept)


def parse(text: str, rank: int) -> NcclInit | None:
    """The timing ``text`` (one line of ``rank``'s output) gives, or None. The rank NCCL names
    is the one in that communicator: the rank whose output it is counts instead."""
    if MARK not in text:
        return None
    found = _LINE.search(text)
    if found is None:
        return None
    total = float(found.group(3))
    if not _seconds(total):
        return None
    parts = tuple(
        (name, float(seconds))
        for name, seconds in _PART.findall(found.group(4))[:MAX_PARTS]
        if _seconds(float(seconds))
    )
    return NcclInit(rank, total, parts)


def _seconds(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value < MAX_SECONDS
    )
