"""The trainer's events (schema v1), read as typed values.

Each rank appends one JSON object per line to ``<run dir>/events/rank{R}.jsonl`` (see
``trainer/README.md`` and ``docs/events.md``). Those lines come from a host, so they are read as
hostile: :func:`parse_event` returns ``None`` for anything that is not a v1 event (not JSON, too
long, nested too deep, an unknown ``type``, a missing or mistyped common field) and never raises.
Within an event that is recognised, a field of the wrong type (or a number that is not finite)
becomes ``None`` rather than costing the whole event: one odd value must not hide a step.

This parser is the one place that decides what of a host's values the rest of ddptui sees, so
that judging, recording and rendering need not each defend themselves (each field read by
:mod:`ddptui.run.following.event_fields`):

- every string is :func:`~ddptui.untrusted.plain` (terminal escapes, bidi marks and lone
  surrogates shown as visible escapes) and cut to its cap: short ones on one line, ``message``
  and ``traceback`` with their newlines. A hang's words, a record's TOML and a terminal take
  them as they are;
- a time (``time``, ``launch``) outside ``[0, MAX_EVENT_TIME)`` is no time any clock gives:
  the event is garbled (a stamp, left out). How far ahead of the head node's clock a time may
  be is the model's to clamp (:mod:`ddptui.run.following.host_clocks`): the parser knows no clock;
- every duration, rate and size has a cap (:data:`MAX_STEP_S`, :data:`MAX_EXPECT_S`,
  :data:`MAX_SAMPLES_PER_S`, :data:`MAX_MIB`): a larger value is read as the cap, a negative
  one as not reported.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Final, TypeAlias

from ddptui.run.following import event_fields as fields
from ddptui.run.following.event_fields import (
    MAX_EVENT_TIME,
    MAX_EXPECT_S,
    MAX_MESSAGE_CHARS,
    MAX_MIB,
    MAX_PATH_CHARS,
    MAX_PHASE_CHARS,
    MAX_RESCUE_CHARS,
    MAX_SAMPLES_PER_S,
    MAX_SKIPPED_CHECKPOINTS,
    MAX_STEP_S,
    MAX_TEXT_CHARS,
    MAX_TRACEBACK_CHARS,
)
from ddptui.untrusted import finite, plain

__all__ = [
    "EVENT_TYPES",
    "EVENT_VERSION",
    "MAX_EVENT_LINE_BYTES",
    "MAX_EVENT_TIME",
    "MAX_EXPECT_S",
    "MAX_MESSAGE_CHARS",
    "MAX_MIB",
    "MAX_PATH_CHARS",
    "MAX_PHASE_CHARS",
    "MAX_RESCUE_CHARS",
    "MAX_SAMPLES_PER_S",
    "MAX_STEP_S",
    "MAX_TEXT_CHARS",
    "MAX_TRACEBACK_CHARS",
    "CheckpointEvent",
    "DoneEvent",
    "EpochEndEvent",
    "ErrorEvent",
    "EventBase",
    "EventReader",
    "PhaseEvent",
    "RankEvent",
    "SkippedCheckpoint",
    "StartEvent",
    "StepEvent",
    "StopRequestedEvent",
    "parse_event",
]
"""The events' API: their classes, their parse and the limits ``docs/events.md`` gives, which
are the caps :mod:`ddptui.run.following.event_fields` reads each field within."""

EVENT_VERSION: Final = 1
"""The ``v`` this reader understands; the trainer writes the same number."""

MAX_EVENT_LINE_BYTES: Final = 65536
"""A longer line is garbled: the trainer's largest event (an ``error`` with its traceback) is far
smaller, and a cap keeps one host from making the head node parse megabytes per line."""


@dataclass(frozen=True, kw_only=True)
class EventBase:
    """The fields every event carries. ``time`` is the rank's Unix time when it wrote the event."""

    rank: int
    local_rank: int
    node_rank: int
    """torchrun's ``GROUP_RANK``: which node (host) the rank runs on."""
    world_size: int
    time: float


@dataclass(frozen=True)
class SkippedCheckpoint:
    """A checkpoint ``--resume latest`` passed over, and why (e.g. a checksum mismatch)."""

    path: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class StartEvent(EventBase):
    """The rank started training (fresh or resumed)."""

    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Every trainer option as the rank resolved it (JSON values, read-only)."""
    versions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """``python``, ``torch`` and, on GPU, ``cuda`` and ``nccl``."""
    device: str | None = None
    backend: str | None = None
    fsdp: bool | None = None
    task: str | None = None
    parameters: int | None = None
    global_batch: int | None = None
    steps_per_epoch: int | None = None
    total_steps: int | None = None
    start_step: int | None = None
    start_epoch: int | None = None
    resumed_from: str | None = None
    exact_resume: bool | None = None
    """``None`` on a fresh start; ``False`` when resumed at another world size or batch shape."""
    skipped_checkpoints: tuple[SkippedCheckpoint, ...] = ()
    hostname: str | None = None
    pid: int | None = None
    launch: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    """When (Unix seconds) the rank's process began, it had imported torch and it met its peers
    (``process``, ``imported``, ``rendezvous``): its part of the launch timeline."""
    control: frozenset[str] = frozenset()
    """The requests in ``control/`` the rank reads (``stop``: a stop asks it to checkpoint and
    end, as the bundled trainer does, before any signal)."""


@dataclass(frozen=True, kw_only=True)
class StepEvent(EventBase):
    """One logged optimizer step (every ``--log-every`` steps, and the last one)."""

    step: int
    """Optimizer steps done, 1-based; resumed steps count."""
    epoch: int | None = None
    loss: float | None = None
    """This rank's loss; ``None`` when it was not finite (or not reported)."""
    lr: float | None = None
    samples_per_s: float | None = None
    step_time_s: float | None = None
    compute_s: float | None = None
    """The rank's own work per step, no collective in it (its forward pass): where a straggler
    shows, since the step time is the slowest rank's on every rank."""
    cuda_allocated_mib: float | None = None
    cuda_reserved_mib: float | None = None
    cuda_peak_mib: float | None = None
    rss_mib: float | None = None
    """Resident memory on CPU runs (the ``cuda_*`` fields on GPU runs)."""


@dataclass(frozen=True, kw_only=True)
class CheckpointEvent(EventBase):
    """Global rank 0 saved a checkpoint (a path on node 0)."""

    path: str | None = None
    step: int | None = None
    epoch: int | None = None
    seconds: float | None = None
    bytes: int | None = None
    rescue: str | None = None
    """Why a rank wrote it after a peer failed (the bundled trainer's rescue); None for a
    checkpoint the run took itself."""


@dataclass(frozen=True, kw_only=True)
class PhaseEvent(EventBase):
    """The rank enters a part of its work that may go long without a step (a checkpoint save,
    an evaluation), or goes back to training (``TRAINING``); its next step event ends it too."""

    phase: str
    expect_s: float | None = None
    """How long the phase may take at most (a day at most: :data:`MAX_EXPECT_S`); past it (and
    the hang window), the run is hung."""

    TRAINING: ClassVar[str] = "train"


@dataclass(frozen=True, kw_only=True)
class EpochEndEvent(EventBase):
    epoch: int | None = None
    step: int | None = None


@dataclass(frozen=True, kw_only=True)
class StopRequestedEvent(EventBase):
    step: int | None = None
    source: str | None = None
    """``SIGTERM``, ``SIGINT``, ``control/stop``, or ``peer`` when another rank asked."""


@dataclass(frozen=True, kw_only=True)
class DoneEvent(EventBase):
    """The last event of a rank that exits 0."""

    step: int | None = None
    reason: str | None = None
    """``completed`` or ``stopped``."""


@dataclass(frozen=True, kw_only=True)
class ErrorEvent(EventBase):
    """The rank raised; torchrun will see it exit non-zero."""

    message: str | None = None
    """``ExceptionType: text``, at most :data:`MAX_MESSAGE_CHARS` (plain, newlines kept)."""
    traceback: str | None = None


RankEvent: TypeAlias = (
    StartEvent
    | StepEvent
    | CheckpointEvent
    | PhaseEvent
    | EpochEndEvent
    | StopRequestedEvent
    | DoneEvent
    | ErrorEvent
)


EVENT_TYPES: Final[Mapping[str, type[RankEvent]]] = MappingProxyType(
    {
        "start": StartEvent,
        "step": StepEvent,
        "checkpoint": CheckpointEvent,
        "phase": PhaseEvent,
        "epoch_end": EpochEndEvent,
        "stop_requested": StopRequestedEvent,
        "done": DoneEvent,
        "error": ErrorEvent,
    }
)
"""Each ``type`` of schema v1 and its class."""


class _Garbled(Exception):
    """Raised inside the parser only; :func:`parse_event` turns it into ``None``."""


# Python's json reads (and, unless told otherwise, a user's script writes) NaN and Infinity,
# which JSON lacks: they are read, then turned away where a finite number is needed.
_DECODER = json.JSONDecoder()


def parse_event(line: str | bytes) -> RankEvent | None:
    """The event on one line (a trailing newline is fine), or ``None`` if it is not a v1 event."""
    try:
        return _parse(line)
    # RecursionError: deep nesting; ValueError: bad JSON, bad UTF-8, an integer too long.
    except (_Garbled, ValueError, RecursionError):
        return None


def _parse(line: str | bytes) -> RankEvent | None:
    if isinstance(line, bytes):
        if len(line) > MAX_EVENT_LINE_BYTES + 2:
            return None
        text = line.decode("utf-8")
    else:
        # Characters never outnumber UTF-8 bytes, so the cheap test rejects most floods.
        if len(line) > MAX_EVENT_LINE_BYTES + 2:
            return None
        text = line
    text = text.rstrip("\r\n")
    if not text.isascii() and len(text.encode("utf-8", "surrogatepass")) > MAX_EVENT_LINE_BYTES:
        return None
    if len(text) > MAX_EVENT_LINE_BYTES:
        return None
    doc = _DECODER.decode(text)
    if not isinstance(doc, dict) or not _is_int(doc.get("v")) or doc["v"] != EVENT_VERSION:
        return None
    kind = doc.get("type")
    build = _BUILDERS.get(kind) if isinstance(kind, str) else None
    if build is None:
        return None
    common = _common(doc)
    if common is None:
        return None
    return build(doc, common)


def _common(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    rank, local_rank = fields.count(doc.get("rank")), fields.count(doc.get("local_rank"))
    node_rank, world_size = fields.count(doc.get("node_rank")), fields.count(doc.get("world_size"))
    time = fields.unix_time(doc.get("time"))
    if rank is None or local_rank is None or node_rank is None or time is None:
        return None
    if world_size is None or not rank < world_size:
        return None
    return {
        "rank": rank,
        "local_rank": local_rank,
        "node_rank": node_rank,
        "world_size": world_size,
        "time": time,
    }


def _is_int(value: Any) -> bool:
    # JSON gives exact ints (bool is an int subclass, and JSON true is never a number here).
    return type(value) is int


def _skipped(value: Any) -> tuple[SkippedCheckpoint, ...]:
    if not isinstance(value, list):
        return ()
    items = []
    for item in value[:MAX_SKIPPED_CHECKPOINTS]:
        if isinstance(item, dict):
            path, reason = (
                fields.text(item.get("path"), MAX_PATH_CHARS),
                fields.text(item.get("reason")),
            )
            if path is not None and reason is not None:
                items.append(SkippedCheckpoint(path, reason))
    return tuple(items)


def _start(doc: Mapping[str, Any], common: dict[str, Any]) -> StartEvent:
    return StartEvent(
        **common,
        config=fields.config(doc.get("config")),
        versions=fields.versions(doc.get("versions")),
        device=fields.text(doc.get("device")),
        backend=fields.text(doc.get("backend")),
        fsdp=fields.flag(doc.get("fsdp")),
        task=fields.text(doc.get("task")),
        parameters=fields.count(doc.get("parameters")),
        global_batch=fields.count(doc.get("global_batch")),
        steps_per_epoch=fields.count(doc.get("steps_per_epoch")),
        total_steps=fields.count(doc.get("total_steps")),
        start_step=fields.count(doc.get("start_step")),
        start_epoch=fields.count(doc.get("start_epoch")),
        resumed_from=fields.text(doc.get("resumed_from"), MAX_PATH_CHARS),
        exact_resume=fields.flag(doc.get("exact_resume")),
        skipped_checkpoints=_skipped(doc.get("skipped_checkpoints")),
        hostname=fields.text(doc.get("hostname")),
        pid=fields.count(doc.get("pid")),
        launch=fields.launch(doc.get("launch")),
        control=fields.control(doc.get("control")),
    )


def _step(doc: Mapping[str, Any], common: dict[str, Any]) -> StepEvent:
    step = fields.count(doc.get("step"))
    if step is None:
        # A step event without its step says nothing that can be placed on a curve.
        raise _Garbled("step")
    return StepEvent(
        **common,
        step=step,
        epoch=fields.count(doc.get("epoch")),
        loss=finite(doc.get("loss")),
        lr=finite(doc.get("lr")),
        samples_per_s=fields.amount(doc.get("samples_per_s"), MAX_SAMPLES_PER_S),
        step_time_s=fields.amount(doc.get("step_time_s"), MAX_STEP_S),
        compute_s=fields.amount(doc.get("compute_s"), MAX_STEP_S),
        cuda_allocated_mib=fields.amount(doc.get("cuda_allocated_mib"), MAX_MIB),
        cuda_reserved_mib=fields.amount(doc.get("cuda_reserved_mib"), MAX_MIB),
        cuda_peak_mib=fields.amount(doc.get("cuda_peak_mib"), MAX_MIB),
        rss_mib=fields.amount(doc.get("rss_mib"), MAX_MIB),
    )


def _checkpoint(doc: Mapping[str, Any], common: dict[str, Any]) -> CheckpointEvent:
    return CheckpointEvent(
        **common,
        path=fields.text(doc.get("path"), MAX_PATH_CHARS),
        step=fields.count(doc.get("step")),
        epoch=fields.count(doc.get("epoch")),
        seconds=fields.amount(doc.get("seconds"), MAX_EXPECT_S),
        bytes=fields.count(doc.get("bytes")),
        rescue=fields.text(doc.get("rescue"), MAX_RESCUE_CHARS),
    )


def _phase(doc: Mapping[str, Any], common: dict[str, Any]) -> PhaseEvent:
    phase = fields.text(doc.get("phase"), MAX_PHASE_CHARS)
    if not phase:
        # Without its phase it says nothing of how long a silence may be.
        raise _Garbled("phase")
    expect_s = fields.amount(doc.get("expect_s"), MAX_EXPECT_S)
    return PhaseEvent(**common, phase=phase, expect_s=expect_s or None)


def _epoch_end(doc: Mapping[str, Any], common: dict[str, Any]) -> EpochEndEvent:
    return EpochEndEvent(
        **common, epoch=fields.count(doc.get("epoch")), step=fields.count(doc.get("step"))
    )


def _stop_requested(doc: Mapping[str, Any], common: dict[str, Any]) -> StopRequestedEvent:
    return StopRequestedEvent(
        **common, step=fields.count(doc.get("step")), source=fields.text(doc.get("source"))
    )


def _done(doc: Mapping[str, Any], common: dict[str, Any]) -> DoneEvent:
    return DoneEvent(
        **common, step=fields.count(doc.get("step")), reason=fields.text(doc.get("reason"))
    )


def _error(doc: Mapping[str, Any], common: dict[str, Any]) -> ErrorEvent:
    message = doc.get("message")
    return ErrorEvent(
        **common,
        message=plain(message, limit=MAX_MESSAGE_CHARS) if isinstance(message, str) else None,
        traceback=fields.tail(doc.get("traceback"), MAX_TRACEBACK_CHARS),
    )


_BUILDERS: Final[dict[str, Callable[[Mapping[str, Any], dict[str, Any]], RankEvent]]] = {
    "start": _start,
    "step": _step,
    "checkpoint": _checkpoint,
    "phase": _phase,
    "epoch_end": _epoch_end,
    "stop_requested": _stop_requested,
    "done": _done,
    "error": _error,
}
"""``type`` → builder; every other ``type`` is garbled (a newer trainer's event, or junk)."""


class EventReader:
    """Reads one rank's event lines in order, counting what it had to skip.

    Blank lines are passed over without counting; any other line that is not an event counts
    as garbled, and the first :data:`EXAMPLE_CHARS` characters of the latest one are kept so a
    view can show what it was.
    """

    EXAMPLE_CHARS: Final = 200

    def __init__(self) -> None:
        self.events = 0
        self.garbled = 0
        self.last_garbled: str | bytes | None = None

    def feed(self, line: str | bytes) -> RankEvent | None:
        event = parse_event(line)
        if event is not None:
            self.events += 1
        elif line.strip():
            self.garbled += 1
            self.last_garbled = line[: self.EXAMPLE_CHARS]
        return event
