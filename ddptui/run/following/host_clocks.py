"""How late a host's event may be dated: no later than the host's clock can say as it arrives.

The parser knows no clock (:mod:`ddptui.run.following.events` takes any time below 2³²); the model
dates each event it takes here, by the head node's clock moved by the offset the check measured of
the host's, so that no rank's time is later than its host could have written it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from types import MappingProxyType
from typing import Final

from ddptui.run.following.events import RankEvent, StartEvent
from ddptui.run.record import NodeRecord

CLOCK_SKEW_S: Final = 2.0
"""How far past its host's clock now (the head node's plus the offset the check measured) an
event's time may be: the check's default ``max_clock_skew_s`` (the record keeps each host's
offset, not the setting). A later time is read as that: the parser knows no clock, and a rank
that says it stepped in the future would be a straggler "since" a date no clock reaches, or
keep the run from ever stalling."""
MAX_CLOCK_OFFSET_S: Final = 3600.0
"""A host's clock counts as ahead of the head node's by at most this, whatever the check
measured: the measure comes from the host's own answer."""


class HostClocks:
    """The clocks of an attempt's hosts, as far as their events' times go."""

    def __init__(self, nodes: Iterable[NodeRecord], wall: Callable[[], float]) -> None:
        """``nodes``: the attempt's, with the offsets the check measured; ``wall``: the head
        node's clock."""
        self._wall = wall
        self._ahead = {node.host: CLOCK_SKEW_S + _ahead(node.clock_offset_s) for node in nodes}
        """Host → how far past the head node's clock its events' times may be."""

    def dated(self, host: str, event: RankEvent) -> RankEvent:
        """``event`` with no time later than ``host``'s clock may say now."""
        latest = self._wall() + self._ahead.get(host, CLOCK_SKEW_S)
        if event.time > latest:
            event = dataclasses.replace(event, time=latest)
        if isinstance(event, StartEvent) and any(at > latest for at in event.launch.values()):
            launch = {stage: min(at, latest) for stage, at in event.launch.items()}
            event = dataclasses.replace(event, launch=MappingProxyType(launch))
        return event


def _ahead(offset: float | None) -> float:
    """How far ahead of the head node's clock a host's is, as far as its events' times go."""
    return min(offset, MAX_CLOCK_OFFSET_S) if offset is not None and offset > 0.0 else 0.0
