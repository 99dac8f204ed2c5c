"""The launch timeline as the supervisor learns it (:mod:`ddptui.run.timeline`).

The stages its backend reaches (a host staged, its torchrun started) wait here until the
record's next change takes them, so a launch on 64 hosts writes the record a few times rather
than once a host. Each node's ranks' stages are read from the run's model
(:meth:`~ddptui.run.following.model.RunModel.timeline`); once every node made its first step the
summary is said, once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ddptui.run.following.model import RunModel
from ddptui.run.following.nccl_init import NcclInit
from ddptui.run.record import NodeRecord, RunRecord
from ddptui.run.timeline import Timeline


@dataclass(frozen=True)
class _Stamp:
    attempt: int
    host: str
    stage: str
    at: float


ASKED_WITHIN_S = 300.0
"""How long before a start its request may say it was asked for (a queued resume waits)."""


class LaunchTiming:
    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        self._attempt = 0
        self._began: dict[int, float] = {}
        """Attempt → when its start was asked, for an attempt whose timeline is not in the
        record yet (a resume's; a first launch's began with its check)."""
        self._pending: list[_Stamp] = []
        self._nccl: dict[tuple[int, str], NcclInit] = {}
        """(attempt, host) → the NCCL init the record lacks."""
        self._summarised: set[int] = set()

    def begin(self, attempt: int, asked_at: float | None = None) -> None:
        """Attempt ``attempt`` starts being started now; ``asked_at``: when it was asked for
        (a viewer's word: taken only if it is within :data:`ASKED_WITHIN_S` before now)."""
        self._attempt = attempt
        now = self._wall()
        began = now if asked_at is None or not 0 <= now - asked_at <= ASKED_WITHIN_S else asked_at
        self._began.setdefault(attempt, began)

    def reached(self, host: str, stage: str) -> None:
        """``host`` reached ``stage`` of the attempt being started, now."""
        if self._attempt:
            self._pending.append(_Stamp(self._attempt, host, stage, self._wall()))

    def started(self, nodes: Iterable[NodeRecord]) -> None:
        """Every node of the attempt runs: a node whose backend did not tell when it started
        (a scheduler's) started now; where it did, its time stands (a stage is kept once)."""
        for node in nodes:
            self.reached(node.host, "started")

    def observe(self, record: RunRecord, model: RunModel) -> bool:
        """Take the stages the model's ranks told of that the record lacks; whether there are
        stamps waiting for the record."""
        recorded = record.timeline(model.attempt)
        if recorded is None or recorded.complete(node.host for node in record.nodes):
            return self._waiting
        live = model.timeline()
        if live is not None:
            for host, stamps in live.hosts.items():
                known = recorded.hosts.get(host, {})
                self._pending += [
                    _Stamp(model.attempt, host, stage, at)
                    for stage, at in stamps.items()
                    if stage not in known
                ]
            for host, init in live.nccl.items():
                if recorded.nccl.get(host) != init:
                    self._nccl[model.attempt, host] = init
        return self._waiting

    @property
    def _waiting(self) -> bool:
        return bool(self._pending or self._nccl)

    def applied(self, change: Callable[[RunRecord], None]) -> Callable[[RunRecord], None]:
        """``change``, after putting the waiting stamps into the record it changes."""

        def changed(record: RunRecord) -> None:
            self._apply(record)
            change(record)

        return changed

    def _apply(self, record: RunRecord) -> None:
        for stamp in self._pending:
            timeline = record.timeline(stamp.attempt)
            if timeline is None:
                began = self._began.get(stamp.attempt, stamp.at)
                timeline = Timeline(stamp.attempt, began)
                record.timelines.append(timeline)
            timeline.stamp(stamp.host, stamp.stage, stamp.at)
        for (attempt, host), init in self._nccl.items():
            kept = record.timeline(attempt)
            if kept is not None:
                kept.note_nccl(host, init)
        self._pending, self._nccl = [], {}

    def summary(self, record: RunRecord) -> str | None:
        """The summary of the attempt this supervisor started, the first time its timeline is
        whole (an earlier attempt's was said by whoever started it)."""
        timeline = record.timeline(self._attempt) if self._attempt else None
        if timeline is None or timeline.attempt in self._summarised:
            return None
        line = timeline.summary(node.host for node in record.nodes)
        if line is not None:
            self._summarised.add(timeline.attempt)
        return line
