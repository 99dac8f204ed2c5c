"""When an incident's fault happened, and when the failed attempt made its last step at what
pace (``recovery.fault_times``, pure): from what a RunModel fed two hosts' lines says, its
arrival clock and the ranks' clock kept apart so that a time on the wrong one shows."""

from __future__ import annotations

import dataclasses

import pytest

from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Hang, Verdict
from ddptui.run.following.updates import FileLine, Heartbeat, HostSilent
from ddptui.run.record import RunState
from ddptui.run.supervisor.recovery import Blame, FaultTimes, fault_times
from tests.run.bed import two_host_record
from tests.run.modelkit import Clock, event_json, exit_line, started

SHIFT = 1_799_999_000.0
"""The wall clock (what dates the ranks' lines) minus the clock what arrives is timed by."""
FAILED = Verdict(RunState.FAILED, "b (node 1) stopped answering", "b")
LOST_B = Blame(("b",), "b stopped answering")


def _model() -> tuple[RunModel, Clock]:
    clock = Clock()
    record = two_host_record()
    # b's clock is 2 s ahead of the head node's, as the check measured it.
    record.nodes[1] = dataclasses.replace(record.nodes[1], clock_offset_s=2.0)
    return started(RunModel(record, clock=clock, wall=lambda: clock.now + SHIFT)), clock


def _step(model: RunModel, rank: int, step: int, at: float, step_time_s: float) -> None:
    line = event_json("step", rank, step=step, loss=1.0, step_time_s=step_time_s, time=at)
    model.apply(FileLine("ab"[rank // 2], f"events/rank{rank}.jsonl", step, line))


def test_a_silent_host_failed_after_it_was_last_heard_from_not_when_it_was_judged() -> None:
    model, clock = _model()
    model.apply(Heartbeat("b", clock.now, {1: True}))
    heard = clock.now
    clock.now += 12.0
    model.apply(Heartbeat("a", clock.now, {1: True}))
    model.apply(HostSilent("b", 12.0, "connect timed out"))
    clock.now += 3.0
    assert fault_times(model, FAILED, LOST_B, None).fault_at == heard + SHIFT
    # Unblamed, the verdict's host is the evidence all the same.
    assert fault_times(model, FAILED, None, None).fault_at == heard + SHIFT


def test_a_host_killed_as_a_group_failed_after_it_was_last_seen_running() -> None:
    model, clock = _model()
    model.apply(Heartbeat("b", clock.now, {1: True}))
    running = clock.now
    for _ in range(2):
        clock.now += 2.0
        model.apply(Heartbeat("b", clock.now, {1: False}))
    assert model.nodes["b"].vanished
    killed = Blame(("b",), "its processes were killed as a group (b)")
    assert fault_times(model, FAILED, killed, None).fault_at == running + SHIFT


@pytest.mark.parametrize("first", ["line", "exit"])
def test_a_failure_is_dated_by_its_first_word_the_first_failure_s_line_or_an_exit(
    first: str,
) -> None:
    model, clock = _model()
    said = FileLine("b", "logs/attempt-1/x_y/attempt_0/0/stderr.log", 10,
                    "RuntimeError: CUDA out of memory")  # fmt: skip
    exited = exit_line("b", 1)
    clock.now += 5.0
    for update in (said, exited) if first == "line" else (exited, said):
        model.apply(update)
        clock.now += 4.0
    failed = Verdict(RunState.FAILED, "torchrun on b (node 1) exited 1", "b")
    assert fault_times(model, failed, None, None).fault_at == 1005.0 + SHIFT


def test_a_hang_s_fault_is_when_its_ranks_last_progressed_and_nothing_is_no_date() -> None:
    model, _ = _model()
    hang = Hang(since=SHIFT + 900.0, window_s=60.0, step=None, ranks=())
    assert fault_times(model, hang, None, None) == FaultTimes(SHIFT + 900.0, None, None)
    unknown = Verdict(RunState.FAILED, "the job ended", None)
    assert fault_times(model, unknown, None, None) == FaultTimes(None, None, None)


def test_the_last_step_is_dated_by_the_rank_that_made_it_last_on_the_head_node_s_clock() -> None:
    model, _ = _model()
    wall = SHIFT + 1000.0
    _step(model, 0, 7, wall - 29.5, 0.5)
    _step(model, 1, 6, wall - 20.0, 9.0)  # behind: not at the last step
    # On b, whose clock is 2 s ahead: later by their own clock, earlier by the head node's.
    _step(model, 2, 7, wall - 28.5, 0.6)
    _step(model, 3, 7, wall - 29.0, 0.7)
    times = fault_times(model, FAILED, LOST_B, 7)
    assert (times.last_step_at, times.step_s) == (wall - 29.5, 0.5)
    # A step no rank made in this attempt (the checkpoint's it resumed from) is not dated.
    none = fault_times(model, FAILED, LOST_B, 5)
    assert (none.last_step_at, none.step_s) == (None, None)
    assert fault_times(model, FAILED, LOST_B, None).last_step_at is None
