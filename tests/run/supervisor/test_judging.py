"""Judging a followed attempt (ddptui/run/supervisor/judging.py): whether it hangs (hang,
hang_window), on a RunModel fed what two hosts send."""

from __future__ import annotations

import pytest

from ddptui.config.model import JobConfig
from ddptui.run.following.model import RunModel
from ddptui.run.following.updates import FileLine
from ddptui.run.record import RunState
from ddptui.run.supervisor import judging
from tests.run.bed import two_host_record
from tests.run.modelkit import Clock, beat, event_json, started, step_line

_record = two_host_record


def test_a_run_whose_answering_hosts_all_stop_stepping_hangs_naming_the_stopped_rank() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock, wall=clock))
    for step in range(1, 4):
        clock.now += 0.1
        for rank in range(4):
            model.apply(step_line("ab"[rank // 2], rank, step))
    # Rank 3's process is stopped; the others wait for it in a collective.
    for second in range(19):
        clock.now += 1.0
        model.apply(beat("a", clock, {0: ("S", 1.0), 1: ("S", 1.0)}))
        model.apply(beat("b", clock, {2: ("S", 1.0), 3: ("T", 0.0)}))
        assert judging.hang(model) is None, f"hung after {second + 1} s of a 20 s window"
    clock.now += 2.0
    hang = judging.hang(model)
    assert hang is not None and hang.window_s == 20.0 and hang.step == 3
    assert hang.since == pytest.approx(1000.3)
    assert [(rank.rank, rank.process) for rank in hang.odd] == [(3, "T")]
    assert hang.odd[0].why is not None and "stopped (SIGSTOP" in hang.odd[0].why
    summary = hang.summary(clock.now)
    assert summary.startswith("no step for 21 s at step 3; rank 3 on b: its process is stopped")
    # A step again: no longer hung.
    model.apply(step_line("a", 0, 4))
    assert judging.hang(model) is None


@pytest.mark.parametrize("last_word", ["done", "error"])
def test_ranks_that_said_they_are_done_are_never_hung_while_their_processes_exit(
    last_word: str,
) -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock, wall=clock))
    for rank in range(4):
        model.apply(step_line("ab"[rank // 2], rank, 3))
    for rank in (0, 1, 2):
        line = event_json("done", rank, step=3, reason="completed")
        model.apply(FileLine("ab"[rank // 2], f"events/rank{rank}.jsonl", 4, line))
    clock.now += 60.0
    model.apply(beat("a", clock, {0: ("S", 0.0), 1: ("S", 0.0)}))
    model.apply(beat("b", clock, {2: ("S", 0.0), 3: ("S", 0.0)}))
    # Rank 3 has not said it is done: its host is still judged.
    hang = judging.hang(model)
    assert hang is not None and hang.step == 3
    fields = {"step": 3} if last_word == "done" else {"message": "RuntimeError: NCCL error"}
    model.apply(FileLine("b", "events/rank3.jsonl", 4, event_json(last_word, 3, **fields)))
    clock.now += 600.0
    # A rank that raised may hang in its exit (an NCCL communicator that never aborts).
    assert (judging.hang(model) is None) == (last_word == "done")


def test_the_hang_window_follows_the_slowest_rank_or_the_hosts_file() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock, wall=clock))
    for step in (10, 20):
        model.apply(step_line("b", 2, step, step_time_s=0.5))
    # One event every 10 steps of 0.5 s: 5 s between events, so 10 of them are 50 s.
    assert judging.hang_window(model) == 50.0
    assert judging.hang_window(model, 12.5) == 12.5
    clock.now += 49.0
    assert judging.hang(model) is None and judging.hang(model, 12.5) is not None
    # Until then the judging says when the window ends: it looks again at that moment.
    job = JobConfig()
    assert judging.judge(model, RunState.RUNNING, job) == judging.GoesOn(clock.now + 1.0)
    clock.now += 1.5
    assert isinstance(judging.judge(model, RunState.RUNNING, job), judging.Hung)


def _phase(host: str, rank: int, phase: str, **fields: object) -> FileLine:
    return FileLine(
        host, f"events/rank{rank}.jsonl", 50, event_json("phase", rank, phase=phase, **fields)
    )


def test_a_phase_stretches_the_window_until_it_ends_and_a_hang_in_it_says_so() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock, wall=clock))
    for rank in range(4):
        model.apply(step_line("ab"[rank // 2], rank, 10))
    # Rank 0 saves a checkpoint; its peers wait for it without a word.
    clock.now += 5.0
    model.apply(_phase("a", 0, "checkpoint"))
    clock.now += judging.PHASE_HANG_S - 1.0
    assert judging.hang(model) is None
    # Saved: training again, and the training window counts from the phase's end.
    model.apply(_phase("a", 0, "train"))
    clock.now += judging.HANG_MIN_S - 1.0
    assert judging.hang(model) is None
    clock.now += 2.0
    assert judging.hang(model) is not None
    # A phase that says how long it takes gets that long; past it, the hang names it.
    model.apply(_phase("b", 3, "eval", expect_s=90))
    clock.now += 89.0
    assert judging.hang(model) is None
    clock.now += 2.0
    hang = judging.hang(model)
    assert hang is not None and hang.window_s == 90.0
    assert [(rank.rank, rank.why) for rank in hang.odd] == [
        (3, "still in its eval phase, which it said takes 90 s")
    ]
    # A step ends the phase as "train" does.
    model.apply(step_line("b", 3, 11))
    assert model.progress.ranks[3].phase is None


def test_a_rank_stopped_in_a_phase_is_hung_after_the_training_window() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock, wall=clock))
    for rank in range(4):
        model.apply(step_line("ab"[rank // 2], rank, 10))
    # Every rank enters a checkpoint save; rank 3 is SIGSTOPped in it and the others wait.
    for rank in range(4):
        model.apply(_phase("ab"[rank // 2], rank, "checkpoint"))
    model.apply(beat("a", clock, {0: ("S", 1.0), 1: ("S", 1.0)}))
    model.apply(beat("b", clock, {2: ("S", 1.0), 3: ("R", 90.0)}))
    clock.now += judging.HANG_MIN_S + 1.0
    assert judging.hang(model) is None
    model.apply(beat("b", clock, {2: ("S", 1.0), 3: ("T", 0.0)}))
    hang = judging.hang(model)
    assert hang is not None and hang.window_s == judging.HANG_MIN_S
    assert [(rank.rank, rank.process) for rank in hang.odd] == [(3, "T")]


def test_a_phase_before_the_first_step_keeps_the_start_s_window() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock, wall=clock))
    model.apply(_phase("a", 0, "compile", expect_s=5))
    clock.now += judging.FIRST_STEP_HANG_S - 1.0
    assert judging.hang(model) is None


def _said(host: str, rank: int, text: str) -> FileLine:
    return FileLine(host, f"logs/attempt-1/tr/attempt_0/{rank % 2}/stdout.log", 1, text)


def test_a_script_without_events_hangs_once_quiet_and_idle_for_the_window() -> None:
    clock = Clock()
    model = RunModel(_record(), clock=clock, wall=clock)
    idle = {0: ("S", 0.5), 1: ("S", 1.0)}
    # Nothing said yet (a rendezvous waits idle too): the start's window.
    clock.now += judging.FIRST_STEP_HANG_S - 1.0
    model.apply(beat("a", clock, idle))
    model.apply(beat("b", clock, {2: ("S", 0.0), 3: ("S", 0.0)}))
    assert judging.hang(model) is None
    model.apply(_said("a", 0, "epoch 0 batch 10 loss 2.3"))
    clock.now += judging.QUIET_HANG_S - 1.0
    model.apply(beat("a", clock, idle))
    assert judging.hang(model) is None
    clock.now += 2.0
    # One rank busy (it computes, or spins in NCCL): nothing tells a hang apart.
    model.apply(beat("b", clock, {2: ("R", 99.0), 3: ("S", 0.0)}))
    assert judging.hang(model) is None
    model.apply(beat("b", clock, {2: ("S", 0.0), 3: ("T", 0.0)}))
    hang = judging.hang(model)
    assert hang is not None and hang.quiet and hang.window_s == judging.QUIET_HANG_S
    assert [(rank.rank, rank.process) for rank in hang.odd] == [(3, "T")]
    assert hang.summary(clock.now).startswith("no output and no CPU use for 301 s; rank 3 on b")
    assert judging.hang(model, 30.0) is not None
    # A line again: no longer hung.
    model.apply(_said("b", 2, "epoch 0 batch 20 loss 2.1"))
    assert judging.hang(model) is None


def test_only_what_tells_a_rank_apart_is_said() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock, wall=clock))
    for rank in range(4):
        model.apply(step_line("ab"[rank // 2], rank, 7 if rank != 1 else 6))
    clock.now += 31.0
    model.apply(beat("a", clock, {0: ("R", 99.0), 1: ("S", 0.5)}))
    model.apply(beat("b", clock, {2: ("R", 98.0)}))
    hang = judging.hang(model)
    assert hang is not None
    why = {rank.rank: rank.why for rank in hang.ranks}
    assert why[0] is None and why[2] is None
    assert why[1] == "idle (0% CPU) while its peers spin"
    assert why[3] == "no process of this rank is left on its host"


def _hung_at(steps: list[int], processes: dict[int, tuple[str, float]]) -> dict[int, str | None]:
    """What the hang says of each rank when the ranks' last step events said ``steps``."""
    clock = Clock()
    model = started(RunModel(_record(), clock=clock, wall=clock))
    for rank, last in enumerate(steps):
        for step in range(1, last + 1):
            model.apply(step_line("ab"[rank // 2], rank, step))
    clock.now += 31.0
    for host in "ab":
        ranks = {rank: seen for rank, seen in processes.items() if "ab"[rank // 2] == host}
        model.apply(beat(host, clock, ranks))
    hang = judging.hang(model)
    assert hang is not None
    return {rank.rank: rank.why for rank in hang.ranks}


def test_a_rank_one_step_apart_is_not_named_but_one_far_behind_is() -> None:
    waiting = dict.fromkeys(range(4), ("S", 0.0))
    # A ring collective let rank 2 finish the step that the others still wait in.
    assert _hung_at([7, 7, 8, 7], waiting) == dict.fromkeys(range(4))
    assert _hung_at([7, 7, 7, 6], waiting) == dict.fromkeys(range(4))
    behind = _hung_at([20, 20, 20, 12], waiting)
    assert behind == {0: None, 1: None, 2: None, 3: "at step 12, behind the others (step 20)"}
    # The stopped rank explains the hang: how far the others' last events got says nothing.
    stopped = _hung_at([20, 20, 20, 12], {**waiting, 1: ("T", 0.0)})
    assert [rank for rank, why in stopped.items() if why] == [1]


def test_before_the_first_step_and_after_a_resume_the_window_is_the_start_s() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock, wall=clock))
    clock.now += 599.0
    assert judging.hang(model) is None
    clock.now += 2.0
    hang = judging.hang(model)
    assert hang is not None and hang.window_s == 600.0 and hang.step is None
    assert hang.summary(clock.now).startswith("no step for 601 s before the first step")
    # Attempt 1 stepped; attempt 2 has only just started: its ranks get the start's window.
    record = _record(attempts=2)
    resumed = RunModel(record, clock=clock, wall=clock)
    for rank in range(4):
        host = "ab"[rank // 2]
        resumed.apply(FileLine(host, f"events/rank{rank}.jsonl", 1, event_json("start", rank)))
        resumed.apply(step_line(host, rank, 5))
        resumed.apply(FileLine(host, f"events/rank{rank}.jsonl", 9, event_json("start", rank)))
    assert [rank.state.value for rank in resumed.progress.ranks] == ["starting"] * 4
    clock.now += 100.0
    assert judging.hang(resumed) is None


def test_the_gap_a_host_s_thinning_makes_does_not_stretch_the_hang_window() -> None:
    # A world of 4,096 ranks: the agent folds a fast rank's step events over 2 s, so a rank at
    # 5 steps/s arrives 16 steps (3.2 s) apart; its own events are 0.2 s apart.
    clock = Clock()
    record = _record()
    record.world_size = 4096
    model = RunModel(record, clock=clock, wall=clock)

    def step(number: int, step_time_s: float) -> FileLine:
        line = event_json("step", 2, step=number, loss=1.0, step_time_s=step_time_s)
        return FileLine(
            "b", "events/rank2.jsonl", number, line.replace('"world_size": 4', '"world_size": 4096')
        )

    for number in (16, 32):
        model.apply(step(number, 0.2))
    assert judging.hang_window(model) == judging.HANG_MIN_S
    # Ten steps of 0.8 s between events: 8 s, the rank's own, and ten of them are 80 s.
    for number in (42, 52):
        model.apply(step(number, 0.8))
    assert judging.hang_window(model) == 80.0
