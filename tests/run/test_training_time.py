"""A run's effective training time ratio (``training_time.effective_training_time_ratio``): wall
time spent on steps that were kept ÷ wall time since the run's first step, from hand-made
records; a part not known makes the ratio not known, never a guess."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ddptui.run.record import Attempt, Incident, RunRecord, RunState
from ddptui.run.timeline import Timeline
from ddptui.run.training_time import effective_training_time_ratio
from tests.run.bed import two_host_record

FIRST_STEP = 1000.0


def _record(*first_steps: float) -> RunRecord:
    """A running record whose attempts 1, 2, … made their first steps at ``first_steps``."""
    record = two_host_record(len(first_steps))
    for state in (RunState.STAGING, RunState.STARTING, RunState.RUNNING):
        record.transition(state, now=900.0)
    record.timelines = [
        Timeline(
            number,
            at - 60.0,
            {"a": {"started": at - 10.0, "first_step": at + 0.5}, "b": {"first_step": at}},
        )
        for number, at in enumerate(first_steps, 1)
    ]
    return record


def _resumed(number: int = 1, **known: Any) -> Incident:
    """Attempt ``number`` failed at step 140, made at 1400 s at 2 s a step; the resume (the
    next attempt) started from step 100 and made its first step at 1500 s: from 1320 s, 180 s
    lost (unless ``known`` says otherwise)."""
    incident = Incident(
        number,
        number,
        1410.0,
        "b stopped answering",
        ("b",),
        "silent",
        last_step=140,
        last_step_at=1400.0,
        step_s=2.0,
        checkpoint_step=100,
        resumed_attempt=number + 1,
        first_step_at=1500.0,
    )
    return dataclasses.replace(incident, **known)


def _ended(record: RunRecord, at: float) -> RunRecord:
    record.end_attempt(RunState.COMPLETED, "every node exited 0", now=at)
    return record


def test_a_run_without_incidents_kept_all_its_time_once_it_stepped() -> None:
    assert effective_training_time_ratio(_record(FIRST_STEP), 1600.0) == 1.0
    # Before its first step (or for ranks that write no step events) there is nothing to say.
    assert effective_training_time_ratio(_record(), 1600.0) is None
    assert effective_training_time_ratio(_record(FIRST_STEP), FIRST_STEP) is None


def test_one_resume_loses_from_its_checkpoint_s_step_to_the_resumed_attempt_s_first() -> None:
    record = _record(FIRST_STEP, 1500.0)
    record.incidents = [_resumed()]
    # While it runs: to now, 2000 s since the first step, 180 s of them lost.
    assert effective_training_time_ratio(record, 3000.0) == pytest.approx(1820 / 2000)
    # Once it ended: to its end, however long after.
    _ended(record, 2000.0)
    assert effective_training_time_ratio(record, 9999.0) == pytest.approx(820 / 1000)


def test_a_resume_from_the_last_step_s_own_checkpoint_needs_no_pace() -> None:
    record = _ended(_record(FIRST_STEP, 1500.0), 2000.0)
    record.incidents = [_resumed(checkpoint_step=140, step_s=None)]
    assert effective_training_time_ratio(record, 2000.0) == pytest.approx(900 / 1000)


@pytest.mark.parametrize(
    "unknown",
    [
        {"step_s": None},  # steps redone, but not how long they took
        {"checkpoint_step": None},  # the resume did not say which step it started from
        {"last_step_at": None, "last_step": None},  # the failed attempt's ranks wrote no steps
    ],
)
def test_a_resume_whose_loss_is_not_known_makes_the_ratio_not_known(
    unknown: dict[str, Any],
) -> None:
    record = _ended(_record(FIRST_STEP, 1500.0), 2000.0)
    record.incidents = [_resumed(**unknown)]
    assert effective_training_time_ratio(record, 2000.0) is None


def test_a_resume_that_has_not_stepped_yet_loses_until_now() -> None:
    record = _record(FIRST_STEP)
    record.attempts.append(Attempt(2, 1450.0, 29500))
    record.incidents = [_resumed(first_step_at=None)]
    assert effective_training_time_ratio(record, 1600.0) == pytest.approx((600 - 280) / 600)


def test_a_resumed_attempt_s_first_step_comes_from_its_launch_when_the_incident_lacks_it() -> None:
    # A supervisor that took the run over from another never saw the resume's first step.
    record = _ended(_record(FIRST_STEP, 1500.0), 2000.0)
    record.incidents = [_resumed(first_step_at=None)]
    assert effective_training_time_ratio(record, 2000.0) == pytest.approx(820 / 1000)


def test_a_resume_that_failed_before_its_first_step_loses_from_the_same_checkpoint_once() -> None:
    # Attempt 2 never stepped: resumed again as attempt 3, from step 100 again, at 1700 s.
    record = _ended(_record(FIRST_STEP, 1700.0), 2000.0)
    record.attempts.append(Attempt(3, 1650.0, 29500))
    record.timelines[1].attempt = 3
    again = Incident(
        2,
        2,
        1600.0,
        "c stopped answering",
        ("c",),
        "silent",
        last_step=100,
        checkpoint_step=100,
        resumed_attempt=3,
        first_step_at=1700.0,
    )
    record.incidents = [_resumed(first_step_at=None), again]
    assert effective_training_time_ratio(record, 2000.0) == pytest.approx((1000 - 380) / 1000)


def test_a_second_resume_loses_its_own_span_and_an_earlier_overlap_counts_once() -> None:
    record = _ended(_record(FIRST_STEP, 1500.0, 1900.0), 2000.0)
    # Attempt 2 stepped from 1500 s to step 160 at 1800 s, 3 s a step, and failed; resumed from
    # step 150, made at 1770 s, and stepped again at 1900 s: 130 s more.
    second = _resumed(
        2,
        detected_at=1810.0,
        last_step=160,
        last_step_at=1800.0,
        step_s=3.0,
        checkpoint_step=150,
        first_step_at=1900.0,
    )
    record.incidents = [_resumed(), second]
    assert effective_training_time_ratio(record, 2000.0) == pytest.approx(690 / 1000)
    # A resume from a checkpoint older than attempt 2's own start loses no time twice.
    second.checkpoint_step = 40
    assert effective_training_time_ratio(record, 2000.0) == pytest.approx((1000 - 180 - 400) / 1000)


def test_incidents_before_the_first_step_or_not_resumed_cost_no_kept_time() -> None:
    record = _ended(_record(FIRST_STEP, 1500.0), 2000.0)
    early = Incident(1, 1, 990.0, "a rendezvous timed out", ("b",), "silent", resumed_attempt=2)
    given_up = Incident(
        2,
        2,
        1990.0,
        "your code raised",
        (),
        "",
        last_step=300,
        last_step_at=1980.0,
        step_s=2.0,
        action="not recovered",
    )
    record.incidents = [early, given_up]
    assert effective_training_time_ratio(record, 2000.0) == 1.0
