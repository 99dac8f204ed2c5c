"""A host's event values where they meet judging, recording and rendering (issue 41, round 4):
a time no clock gives, a terminal escape or a lone surrogate in a phase, a phase or a step that
says it takes for ever. Each is made safe once, as the event is read
(:mod:`ddptui.run.following.events`) or dated (:class:`~ddptui.run.following.model.RunModel`);
nothing after it may raise or pass it on raw."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ddptui.present.status import hang_lines
from ddptui.run.following.model import RunModel
from ddptui.run.following.progress import STRAGGLER_EVENTS
from ddptui.run.following.state import Hang, Straggler
from ddptui.run.following.updates import FileLine
from ddptui.run.record import RunState
from ddptui.run.store import RunStore
from ddptui.run.supervisor import judging
from ddptui.run.supervisor.stragglers import StragglerNotes
from ddptui.run.view import RunView
from tests.run.bed import two_host_record

NOW = 1.8e9
"""The head node's clock in these tests (2027)."""
SKEW_S = 2.0
"""How far ahead of its host's clock an event may be dated (the check's default skew)."""
DAY_S = 86400.0
HOUR_S = 3600.0


class _Clock:
    """One clock for both of the model's: what arrives, and when."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _line(rank: int, kind: str, lineno: int, **fields: object) -> FileLine:
    """Rank ``rank``'s event in its own file on its own host (a: ranks 0, 1; b: ranks 2, 3)."""
    event = {"v": 1, "type": kind, "rank": rank, "local_rank": rank % 2}
    event.update({"node_rank": rank // 2, "world_size": 4, **fields})
    return FileLine("ab"[rank // 2], f"events/rank{rank}.jsonl", lineno, json.dumps(event))


def _stepping(clock: _Clock, step: int = 10) -> RunModel:
    """A model of a run whose four ranks started and stepped to ``step``."""
    model = RunModel(two_host_record(), clock=clock, wall=clock)
    for rank in range(4):
        model.apply(_line(rank, "start", 1, time=clock.now, start_step=0))
        model.apply(_line(rank, "step", 2, time=clock.now, step=step, step_time_s=0.1))
    return model


def _hung_in(phase: str, **fields: object) -> tuple[_Clock, Hang]:
    """The hang of a run whose rank 3 said it entered ``phase``, long past any window."""
    clock = _Clock(NOW)
    model = _stepping(clock)
    model.apply(_line(3, "phase", 3, time=clock.now, phase=phase, expect_s=30, **fields))
    clock.now += 600.0
    hang = judging.hang(model)
    assert hang is not None
    return clock, hang


def _shown_safely(text: str) -> bool:
    """No control character (C0, DEL, C1: ESC, BEL, CSI, newline…) and no lone surrogate."""
    return not any(
        ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F or 0xD800 <= ord(char) <= 0xDFFF
        for char in text
    )


# --- finding 2: one timestamp kills the judge loop --------------------------------------------


@pytest.mark.parametrize("dated", [1e17, -1e17, 4e9], ids=["far-future", "far-past", "2096"])
def test_a_slow_rank_dated_where_no_clock_is_cannot_end_the_judging(dated: float) -> None:
    clock = _Clock(NOW)
    model = _stepping(clock, step=0)
    notes = StragglerNotes()
    said = []
    for step in range(1, 3 * STRAGGLER_EVENTS):
        clock.now += 1.0
        for rank in range(4):
            # Rank 3 works twice as long as its peers: a straggler, dated by its own word.
            at = dated + 2.0 * step if rank == 3 else clock.now
            compute_s = 0.2 if rank == 3 else 0.1
            line = _line(rank, "step", 2 + step, time=at, step=step, compute_s=compute_s)
            model.apply(line)
        model.read_steps()
        # What the supervisor's judge loop does each round, and `ddptui status`.
        said += notes.changes(model.attempt, model.progress)
        judgement = model.judgement(model.record, None, notes.named(model.attempt))
        RunView.of(model.record, model, judgement)
    slow = model.progress.rank(3)
    assert slow is not None
    assert slow.last_step_at is None or 0.0 <= slow.last_step_at <= clock.now + SKEW_S
    assert all(0.0 <= s.since <= clock.now + SKEW_S for s in notes.named(model.attempt))
    if dated == 4e9:
        # A date to come counts as the host's now: the straggler is still named, since then.
        assert [line.split(" since ")[0] for line in said] == ["straggler: rank 3 on b +100%"]
    else:
        # No clock's time: the events are unreadable, and counted.
        assert model.events.garbled == 3 * STRAGGLER_EVENTS - 1 and said == []


@pytest.mark.parametrize("since", [1e17, -1e17, math.nan, math.inf])
def test_a_straggler_s_words_never_raise(since: float) -> None:
    assert Straggler(3, "b", 0.45, since).words() == "rank 3 on b +45% since ?"


def test_an_event_dated_ahead_of_its_host_s_clock_counts_as_its_now() -> None:
    clock = _Clock(NOW)
    record = two_host_record()
    # b's clock is a minute ahead of the head node's, as the check measured.
    record.nodes[1].clock_offset_s = 60.0
    model = RunModel(record, clock=clock, wall=clock)
    launch = {"process": 4e9, "imported": NOW - 5.0}
    model.apply(_line(0, "start", 1, time=4e9, start_step=0, launch=launch))
    model.apply(_line(2, "start", 1, time=NOW + 50.0, start_step=0, launch=launch))
    model.apply(_line(3, "start", 1, time=NOW + 70.0, start_step=0))
    stamps = model.launches.stamps
    assert stamps[0] == {"process": NOW + SKEW_S, "imported": NOW - 5.0, "ready": NOW + 2}
    assert stamps[2]["ready"] == NOW + 50.0
    assert stamps[2]["process"] == NOW + 60.0 + SKEW_S
    assert stamps[3]["ready"] == NOW + 60.0 + SKEW_S
    start = model.progress.rank(0)
    assert start is not None and start.started_at == NOW + SKEW_S


def test_a_host_s_measured_offset_counts_up_to_an_hour() -> None:
    clock = _Clock(NOW)
    record = two_host_record()
    # The check measured b's clock from b's own answer: a host can say anything.
    record.nodes[1].clock_offset_s = 1e17
    model = RunModel(record, clock=clock, wall=clock)
    model.apply(_line(2, "start", 1, time=4e9, start_step=0))
    assert model.launches.stamps[2]["ready"] == NOW + HOUR_S + SKEW_S


# --- finding 3: terminal escapes through a hang -----------------------------------------------

FORGED = "\u001b]52;c;cHduZWQ=\u001b\\\u001b]0;owned\u0007\n  rank 0 on a: forged"
"""A clipboard write (OSC 52), a window title (OSC 0) and a forged line of its own."""


def test_a_phase_with_terminal_escapes_is_shown_as_text_in_the_hang() -> None:
    clock, hang = _hung_in(FORGED)
    lines = [line.plain for line in hang_lines(hang, clock.now)]
    summary = hang.summary(clock.now)  # what the record and supervisor.log are told
    assert all(_shown_safely(text) for text in [*lines, summary]), [*lines, summary]
    # The hang's line and rank 3's: no line of the host's making.
    assert len(lines) == 2 and lines[1].startswith("  rank 3 on b at step 10: still in its ")
    assert "\\x1b]52;c;cHduZWQ=" in lines[1] and "\\n  rank 0 on a: forged" in lines[1]
    assert "\\x1b]52;c;cHduZWQ=" in summary


# --- finding 4: a lone surrogate stops recording ----------------------------------------------


def test_a_phase_with_a_lone_surrogate_is_recorded(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    record = two_host_record()
    for state in (RunState.STAGING, RunState.STARTING, RunState.RUNNING):
        record.transition(state, state.value, now=0.0)
    store.create(record, "")
    clock, hang = _hung_in("eval\ud800")
    summary = hang.summary(clock.now)
    # What the supervisor does as the run is judged hung: the record takes the summary.
    store.update(record.id, lambda kept: kept.transition(RunState.HUNG, summary, now=clock.now))
    kept = store.load(record.id)
    assert kept.state is RunState.HUNG and "still in its eval\\ud800 phase" in kept.detail


# --- finding 11: hang detection switched off by one event -------------------------------------


def test_one_rank_s_phase_of_any_length_leaves_hang_detection_on() -> None:
    clock = _Clock(NOW)
    model = _stepping(clock)
    model.apply(_line(3, "phase", 3, time=clock.now, phase="eval", expect_s=1e308))
    clock.now += DAY_S - 1.0
    assert judging.hang(model) is None
    clock.now += 2.0
    hang = judging.hang(model)
    assert hang is not None and hang.window_s == DAY_S
    assert [(rank.rank, rank.why) for rank in hang.odd] == [
        (3, "still in its eval phase, which it said takes 86400 s")
    ]


@pytest.mark.parametrize(
    "fields",
    [{"step": 11, "step_time_s": 1e308}, {"step": 2**62, "step_time_s": 0.1}],
    ids=["a step for ever", "a step far ahead"],
)
def test_one_rank_s_step_event_cannot_stretch_the_hang_window_without_end(
    fields: dict[str, float],
) -> None:
    clock = _Clock(NOW)
    model = _stepping(clock)
    model.apply(_line(3, "step", 3, time=clock.now, **fields))
    # Ten step-event intervals of at most an hour each.
    assert judging.hang_window(model) == 10 * HOUR_S
    clock.now += 10 * HOUR_S + 1.0
    assert judging.hang(model) is not None
