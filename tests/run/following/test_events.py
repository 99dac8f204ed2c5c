"""Reading the trainer's events: real recordings, real CPU runs, odd values, garbage."""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddptui.run.following.events import (
    EVENT_TYPES,
    EVENT_VERSION,
    MAX_EVENT_LINE_BYTES,
    MAX_EXPECT_S,
    MAX_MESSAGE_CHARS,
    MAX_MIB,
    MAX_PHASE_CHARS,
    MAX_SAMPLES_PER_S,
    MAX_STEP_S,
    MAX_TEXT_CHARS,
    MAX_TRACEBACK_CHARS,
    CheckpointEvent,
    DoneEvent,
    EpochEndEvent,
    ErrorEvent,
    EventReader,
    PhaseEvent,
    RankEvent,
    StartEvent,
    StepEvent,
    StopRequestedEvent,
    parse_event,
)
from ddptui.untrusted import plain

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "events"
RECORDED = sorted(FIXTURES.glob("*.jsonl"))
COMMON = {"v": 1, "rank": 1, "local_rank": 1, "node_rank": 0, "world_size": 4, "time": 1.5}


def _line(**fields: Any) -> str:
    return json.dumps({**COMMON, **fields})


def _matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the type ``hint`` names (the hints the event classes use)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return type(value) is float and math.isfinite(value)
    if hint is int:
        return type(value) is int and value >= 0
    if hint in (str, bool):
        return type(value) is hint
    if origin is Mapping:
        key, item = args
        return isinstance(value, Mapping) and all(
            _matches(k, key) and (item is Any or _matches(v, item)) for k, v in value.items()
        )
    if origin is tuple:
        return isinstance(value, tuple) and all(_matches(v, args[0]) for v in value)
    if origin is frozenset:
        return isinstance(value, frozenset) and all(_matches(v, args[0]) for v in value)
    if dataclasses.is_dataclass(hint):
        return isinstance(value, hint) and _well_typed(value)
    raise AssertionError(f"no check for {hint!r}")


def _well_typed(event: Any) -> bool:
    hints = typing.get_type_hints(type(event))
    return all(_matches(getattr(event, f.name), hints[f.name]) for f in dataclasses.fields(event))


def _check(line: str | bytes, event: RankEvent | None) -> None:
    if event is None:
        return
    assert _well_typed(event), event
    assert event.rank < event.world_size
    if isinstance(event, ErrorEvent):
        assert len(event.message or "") <= MAX_MESSAGE_CHARS
        assert len(event.traceback or "") <= MAX_TRACEBACK_CHARS


# --- real recordings from the H200 host ---------------------------------------------------


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_every_recorded_event_parses_into_its_class(path: Path) -> None:
    lines = path.read_bytes().splitlines()
    assert lines
    for raw in lines:
        event = parse_event(raw)
        assert type(event) is EVENT_TYPES[json.loads(raw)["type"]]
        _check(raw, event)
        # str and bytes read the same.
        assert parse_event(raw.decode()) == event


def test_recorded_values_come_through() -> None:
    lines = (FIXTURES / "fsdp-resumed.rank0.jsonl").read_text().splitlines()
    starts = [e for e in map(parse_event, lines) if isinstance(e, StartEvent)]
    assert len(starts) == 2
    fresh, resumed = starts
    assert (fresh.device, fresh.backend, fresh.fsdp, fresh.task) == (
        "cuda:0",
        "nccl",
        True,
        "synthetic",
    )
    assert fresh.versions["nccl"] == "2.28.9" and fresh.config["precision"] == "bf16"
    assert fresh.resumed_from is None and fresh.exact_resume is None and fresh.start_step == 0
    assert resumed.resumed_from is not None and resumed.resumed_from.endswith(".pt")
    assert resumed.exact_resume is True and resumed.start_step == 150
    step = parse_event(lines[1])
    assert isinstance(step, StepEvent)
    assert (step.step, step.epoch, step.loss) == (1, 0, 2.253713607788086)
    assert step.cuda_peak_mib == 75.22998046875 and step.rss_mib is None

    error = parse_event((FIXTURES / "nccl-error.rank0.jsonl").read_text())
    assert isinstance(error, ErrorEvent)
    assert error.message is not None and error.message.startswith("DistBackendError: NCCL error")
    assert error.traceback is not None and "Last error:" in error.traceback


# --- real runs of the bundled trainer on this CPU ---------------------------------------


@pytest.mark.slow
def test_every_line_of_the_cpu_runs_is_a_well_typed_event(
    cpu_runs: dict[str, list[bytes]],
) -> None:
    for lines in cpu_runs.values():
        for line in lines:
            event = parse_event(line)
            assert event is not None, line
            _check(line, event)


@pytest.mark.slow
def test_a_completed_cpu_run_reads_as_every_kind_of_event(
    cpu_events: dict[str, list[RankEvent]],
) -> None:
    events = cpu_events["completed"]
    kinds = {type(e) for e in events}
    assert {StartEvent, StepEvent, CheckpointEvent, EpochEndEvent, DoneEvent} <= kinds
    start, done = events[0], events[-1]
    assert isinstance(start, StartEvent) and isinstance(done, DoneEvent)
    assert (start.device, start.backend, start.world_size, start.total_steps) == (
        "cpu",
        "gloo",
        1,
        30,
    )
    assert start.steps_per_epoch == 10 and start.pid is not None and start.hostname
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert [s.step for s in steps] == list(range(1, 31))
    assert all(
        s.loss is not None and s.rss_mib is not None and s.cuda_peak_mib is None for s in steps
    )
    assert [c.step for c in events if isinstance(c, CheckpointEvent)] == [10, 20, 30]
    # Every save is a phase of its own, so that a slow one is not taken for a hang.
    assert [e.phase for e in events if isinstance(e, PhaseEvent)] == ["checkpoint", "train"] * 3
    assert [e.epoch for e in events if isinstance(e, EpochEndEvent)] == [0, 1, 2]
    assert (done.step, done.reason) == (30, "completed")


@pytest.mark.slow
def test_a_stopped_cpu_run_reads_with_its_stop_request(
    cpu_events: dict[str, list[RankEvent]],
) -> None:
    events = cpu_events["stopped"]
    requested = [e for e in events if isinstance(e, StopRequestedEvent)]
    done = events[-1]
    assert [r.source for r in requested] == ["control/stop"]
    assert isinstance(done, DoneEvent) and done.reason == "stopped"
    assert done.step == requested[0].step


@pytest.mark.slow
def test_a_diverged_cpu_run_reads_with_its_loss_as_none(
    cpu_events: dict[str, list[RankEvent]],
) -> None:
    steps = [e for e in cpu_events["diverged"] if isinstance(e, StepEvent)]
    assert steps[0].loss is not None and math.isfinite(steps[0].loss)
    assert [s.loss for s in steps[1:]] == [None] * 7
    assert all(s.lr is not None and s.step_time_s is not None for s in steps)


@pytest.mark.slow
def test_a_failed_cpu_run_reads_as_an_error_event(cpu_events: dict[str, list[RankEvent]]) -> None:
    (error,) = cpu_events["failed"]
    assert isinstance(error, ErrorEvent)
    assert error.message is not None and error.message.startswith("TrainerError: cannot resume")
    assert error.traceback is not None and error.traceback.startswith("Traceback")


# --- what is not an event ---------------------------------------------------------------

NESTED = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    "line",
    [
        "",
        "\n",
        "not json",
        '{"v": 1, "type": "done"',  # cut off mid-line
        "[1, 2]",
        "null",
        json.dumps({**COMMON, "v": 2, "type": "done"}),
        json.dumps({**COMMON, "v": True, "type": "done"}),  # true == 1 in Python, not in JSON
        json.dumps({**COMMON, "v": "1", "type": "done"}),
        json.dumps({k: v for k, v in COMMON.items() if k != "v"} | {"type": "done"}),
        _line(type="progress"),
        _line(type=["done"]),
        _line(),
        _line(type="done", rank="1"),
        _line(type="done", rank=True),
        _line(type="done", rank=-1),
        _line(type="done", rank=4),  # not below world_size
        _line(type="done", world_size=0),
        _line(type="done", node_rank=1.0),
        _line(type="done", rank=2**64),
        _line(type="done", time=None),
        _line(type="done", time="1.5"),
        _line(type="done").replace("1.5", "NaN"),
        _line(type="done").replace("1.5", "Infinity"),
        _line(type="done", time=10**400),
        # No clock's time: time.localtime raises on some (a straggler's "since").
        _line(type="done", time=-1.0),
        _line(type="done", time=2**32),
        _line(type="done", time=1e17),
        json.dumps({k: v for k, v in COMMON.items() if k != "time"} | {"type": "done"}),
        _line(type="step", loss=1.0),  # a step event without its step
        _line(type="step", step=-3),
        _line(type="phase"),  # a phase event without its phase
        _line(type="phase", phase=""),
        _line(type="phase", phase=["checkpoint"]),
        '{"v": 1, "type": "done", "rank": ' + "9" * 5000 + "}",  # int too long to convert
        NESTED,
        '{"v": 1, "type": "start", "config": ' + NESTED + "}",
        b'{"v": 1, "type": "done", "rank": 0, "world_size": 1, "time": 1, "reason": "\xff"}',
        _line(type="error", message="x" * MAX_EVENT_LINE_BYTES),
    ],
)
def test_garbled_lines_read_as_none(line: str | bytes) -> None:
    assert parse_event(line) is None
    data = line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")
    assert parse_event(data) is None


def test_the_byte_cap_counts_bytes_and_ignores_the_newline() -> None:
    skeleton = _line(type="error", message="")
    fill = MAX_EVENT_LINE_BYTES - len(skeleton)
    at_cap = _line(type="error", message="x" * fill)
    assert len(at_cap) == MAX_EVENT_LINE_BYTES
    assert isinstance(parse_event(at_cap + "\n"), ErrorEvent)
    assert isinstance(parse_event((at_cap + "\r\n").encode()), ErrorEvent)
    assert parse_event(_line(type="error", message="x" * (fill + 1))) is None
    # "é" is one character and two bytes: a line of few characters can be over the cap.
    wide = json.dumps(
        {**COMMON, "type": "error", "message": "é" * (fill // 2 + 1)}, ensure_ascii=False
    )
    assert len(wide) < MAX_EVENT_LINE_BYTES < len(wide.encode())
    assert parse_event(wide) is None


def test_odd_optional_values_become_none_and_the_event_stays() -> None:
    event = parse_event(
        _line(
            type="step",
            step=7,
            epoch="zero",
            loss=float("nan"),  # json.dumps writes NaN, as a user's script may
            lr=True,
            samples_per_s=float("inf"),
            step_time_s="0.1",
            cuda_peak_mib=[1],
            rss_mib=12,
        )
    )
    assert event == StepEvent(
        rank=1, local_rank=1, node_rank=0, world_size=4, time=1.5, step=7, rss_mib=12.0
    )
    start = parse_event(
        _line(
            type="start",
            config=[1],
            versions={"torch": "2.13.0", "cuda": None, "nccl": 2},
            fsdp="yes",
            pid=-1,
            skipped_checkpoints=[{"path": "a.pt", "reason": "bad sha256"}, {"path": 1}, "x"],
            hostname={"name": "gpu-a"},
        )
    )
    assert isinstance(start, StartEvent)
    assert dict(start.config) == {} and dict(start.versions) == {"torch": "2.13.0"}
    assert start.fsdp is None and start.pid is None and start.hostname is None
    assert [(s.path, s.reason) for s in start.skipped_checkpoints] == [("a.pt", "bad sha256")]
    for expect_s in (-1, 0, "60", float("inf")):
        phase = parse_event(_line(type="phase", phase="e" * 100, expect_s=expect_s))
        assert isinstance(phase, PhaseEvent) and phase.expect_s is None
        assert phase.phase == "e" * (MAX_PHASE_CHARS - 1) + "…"


def test_host_strings_are_plain_and_cut() -> None:
    escape = "\x1b]0;owned\x07"
    error = parse_event(
        _line(
            type="error",
            message=escape + "m\n" * 3_000,
            traceback="t" * 40_000 + "ValueError: the end",
        )
    )
    assert isinstance(error, ErrorEvent) and error.message is not None
    # Shown, never interpreted; a message keeps its lines.
    assert error.message.startswith("\\x1b]0;owned\\x07m\nm\n")
    assert len(error.message) == MAX_MESSAGE_CHARS and error.message.endswith("…")
    assert error.traceback is not None and len(error.traceback) == MAX_TRACEBACK_CHARS
    assert error.traceback.endswith("ValueError: the end")


def test_a_traceback_that_escapes_make_longer_keeps_its_end_in_whole_escapes() -> None:
    error = parse_event(_line(type="error", traceback="\x1b" * 10_000 + "ValueError: the end"))
    assert isinstance(error, ErrorEvent) and error.traceback is not None
    assert len(error.traceback) <= MAX_TRACEBACK_CHARS
    # Its end (the exception), and escapes whole: never half of one that reads as text.
    assert error.traceback.endswith("\\x1bValueError: the end")
    assert error.traceback.startswith("…\\x1b")


def test_durations_rates_and_sizes_are_capped_and_never_negative() -> None:
    step = parse_event(
        _line(
            type="step",
            step=1,
            step_time_s=1e308,
            compute_s=-0.5,
            samples_per_s=1e300,
            cuda_allocated_mib=12.5,
            cuda_peak_mib=1e300,
            rss_mib=-1,
        )
    )
    assert isinstance(step, StepEvent)
    assert (step.step_time_s, step.compute_s, step.samples_per_s) == (
        MAX_STEP_S,
        None,
        MAX_SAMPLES_PER_S,
    )
    assert (step.cuda_allocated_mib, step.cuda_peak_mib, step.rss_mib) == (12.5, MAX_MIB, None)
    for seconds, read in ((1e308, MAX_EXPECT_S), (-1, None), (2.5, 2.5)):
        checkpoint = parse_event(_line(type="checkpoint", seconds=seconds))
        assert isinstance(checkpoint, CheckpointEvent) and checkpoint.seconds == read
    # A phase longer than a day is read as a day, not as "did not say" (10 minutes).
    phase = parse_event(_line(type="phase", phase="eval", expect_s=1e308))
    assert isinstance(phase, PhaseEvent) and phase.expect_s == MAX_EXPECT_S == 86400.0
    assert MAX_STEP_S == 3600.0


def test_launch_stamps_no_clock_gives_are_left_out() -> None:
    launch = {"process": -1.0, "imported": 2**32, "rendezvous": 1e9}
    start = parse_event(_line(type="start", launch=launch))
    assert isinstance(start, StartEvent) and dict(start.launch) == {"rendezvous": 1e9}


HOSTILE_TEXT = st.text(
    st.sampled_from(["a", "é", " ", "\t", "\n", "\x00", "\x1b", "\x07", "\x7f", "\x9b", "\u202e"])
    | st.sampled_from(["\u2028", "\u200d", "\ufe0f", "\ud800", "\udfff", "🏖"])
    | st.characters(),
    max_size=12,
)
SHORT_TEXTS = ["device", "backend", "task", "hostname", "resumed_from", "source", "reason"]


def _strings(value: Any) -> list[str]:
    """Every string in ``value`` (an event's field), mapping keys too."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [text for key, item in value.items() for text in (key, *_strings(item))]
    if isinstance(value, tuple):
        return [text for item in value for text in _strings(item)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [
            text for f in dataclasses.fields(value) for text in _strings(getattr(value, f.name))
        ]
    return []


@settings(max_examples=200, deadline=None)
@given(st.lists(HOSTILE_TEXT, min_size=8, max_size=8))
def test_every_string_of_an_event_is_plain_and_encodes(texts: list[str]) -> None:
    a, b, c, d, e, f, g, h = texts
    documents: list[dict[str, Any]] = [
        {"type": "start", **dict.fromkeys(SHORT_TEXTS, a), "versions": {b: c}},
        {
            "type": "start",
            "config": {d: [e, {f: g}]},
            "skipped_checkpoints": [{"path": h, "reason": a}],
        },
        {"type": "phase", "phase": "p" + b},
        {"type": "checkpoint", "path": c},
        {"type": "stop_requested", "source": d},
        {"type": "done", "reason": e},
        {"type": "error", "message": f, "traceback": g},
    ]
    for document in documents:
        event = parse_event(json.dumps({**COMMON, **document}))
        assert event is not None, document
        for field in dataclasses.fields(event):
            # A message and a traceback keep their lines; every other string is one line.
            lines = field.name in ("message", "traceback")
            for text in _strings(getattr(event, field.name)):
                assert plain(text, one_line=not lines) == text, (field.name, text)
                text.encode("utf-8")
                assert len(text) <= MAX_TEXT_CHARS


def test_config_is_read_only_and_too_deep_a_config_is_dropped() -> None:
    start = parse_event(_line(type="start", config={"lr": 0.1, "args": ["a", {"b": 1}]}))
    assert isinstance(start, StartEvent)
    assert start.config["args"][1]["b"] == 1
    with pytest.raises(TypeError):
        start.config["lr"] = 1  # type: ignore[index]
    deep: Any = 1
    for _ in range(20):
        deep = {"k": deep}
    start = parse_event(_line(type="start", config=deep))
    assert isinstance(start, StartEvent) and dict(start.config) == {}


def test_the_reader_counts_events_and_garbled_lines() -> None:
    reader = EventReader()
    lines = [_line(type="done", step=3, reason="completed"), "", "garbage", b"\xff\xfe", "  \n"]
    results = [reader.feed(line) for line in lines]
    assert results == [
        DoneEvent(**{k: v for k, v in COMMON.items() if k != "v"}, step=3, reason="completed"),
        None,
        None,
        None,
        None,
    ]
    assert (reader.events, reader.garbled) == (1, 2)
    assert reader.last_garbled == b"\xff\xfe"
    assert EVENT_VERSION == 1


# --- fuzz ---------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from([0, 1, 2**63, -1, "", "step", 1e308]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
FIELDS = sorted(
    {f.name for cls in EVENT_TYPES.values() for f in dataclasses.fields(cls)}
    | {"v", "type", "samples"}
)
REAL_LINES = [line for path in RECORDED for line in path.read_text().splitlines()]
# One line per kind (the first of each), so every kind is mutated, not only steps.
SEEDS = list({json.loads(line)["type"]: line for line in reversed(REAL_LINES)}.values())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_random_bytes_never_raise(data: bytes) -> None:
    _check(data, parse_event(data))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_random_text_never_raises(text: str) -> None:
    _check(text, parse_event(text))


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=12),
    st.sampled_from([*EVENT_TYPES, "other"]),
)
def test_random_documents_of_the_right_shape_never_raise(fields: dict[str, Any], kind: str) -> None:
    line = json.dumps({**COMMON, "type": kind, **fields})
    _check(line, parse_event(line))


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(SEEDS),
    st.lists(st.tuples(st.sampled_from(FIELDS), json_values | st.just(...)), max_size=4),
)
def test_mutated_real_events_never_raise(seed: str, changes: list[tuple[str, Any]]) -> None:
    doc = json.loads(seed)
    for key, value in changes:
        if value is ...:
            doc.pop(key, None)
        else:
            doc[key] = value
    line = json.dumps(doc)
    event = parse_event(line)
    _check(line, event)
    touched = {key for key, _ in changes}
    if not touched & {"v", "type", "rank", "local_rank", "node_rank", "world_size", "time", "step"}:
        # Only optional fields changed: the event must survive.
        assert type(event) is EVENT_TYPES[doc["type"]]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(SEEDS), st.integers(min_value=0), st.binary(max_size=4))
def test_cut_or_spliced_real_lines_never_raise(seed: str, at: int, splice: bytes) -> None:
    raw = seed.encode()
    at %= len(raw) + 1
    _check(raw[:at], parse_event(raw[:at]))
    spliced = raw[:at] + splice + raw[at:]
    _check(spliced, parse_event(spliced))
