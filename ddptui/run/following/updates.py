"""What following a run's hosts yields, update by update: a line of one of its files, a host's
heartbeat, a host gone silent and back. Plain values, for everything that reads a run (the
supervisor, its viewers, the console, the journal) without the SSH that brings them
(:mod:`ddptui.run.following.files`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class FileLine(NamedTuple):
    """A complete line of one of the run's files on ``host`` (path relative to the run dir).

    A tuple: there is one for every line a run writes, and a frozen dataclass costs several
    times as much to make."""

    host: str
    path: str
    offset: int
    """The byte offset just after this line: where to resume."""
    text: str
    cut: bool = False


@dataclass(frozen=True)
class Heartbeat:
    host: str
    time: float
    groups: Mapping[int, bool]
    """Attempt number → whether its process group still lives."""
    sample: Mapping[str, Any] = field(default_factory=dict)
    behind: bool = False
    """Lines written before it were still unsent (the agent reads each file a piece a poll)."""


SILENCE_S = 12.0
"""No heartbeat for this long (the agent sends one every 2 s): the host is not answering."""


@dataclass(frozen=True)
class HostSilent:
    """The host has not answered for ``seconds`` (link cut, host down, sshd gone)."""

    host: str
    seconds: float
    reason: str


@dataclass(frozen=True)
class HostBack:
    """A silent host answers again."""

    host: str


Update = FileLine | Heartbeat | HostSilent | HostBack
