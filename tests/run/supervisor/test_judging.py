"""Judging a followed attempt (ddptui/run/supervisor/judging.py): how it ended (verdict),
and whether it hangs (hang, hang_window), on a RunModel fed what two hosts send."""

from __future__ import annotations

import json

import pytest

from ddptui.run.following.files import FileLine, Heartbeat, HostBack, HostSilent
from ddptui.run.following.model import RunModel
from ddptui.run.record import RunState
from ddptui.run.supervisor import judging
from tests.run.bed import two_host_record
from tests.run.modelkit import Clock, beat, event_json, exit_line, started, step_line, verdict_of

_record = two_host_record


def test_every_node_exiting_0_completes() -> None:
    model = RunModel(_record())
    model.apply(exit_line("a", 0))
    assert judging.verdict(model) is None
    model.apply(exit_line("b", 0))
    assert verdict_of(model).state is RunState.COMPLETED


def test_a_non_zero_exit_fails_naming_the_node_and_the_signal() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock))
    model.apply(exit_line("b", 137))
    # Nothing says why yet: a root cause may be a moment behind the exit.
    assert judging.verdict(model) is None
    clock.now += 3.0
    verdict = verdict_of(model)
    assert verdict.state is RunState.FAILED and verdict.host == "b"
    assert "torchrun on b (node 1) was killed by SIGKILL (exit 137)" in verdict.detail
    # The same exit during a stop is the stop's doing.
    stopped = judging.verdict(model, stopping=True)
    assert stopped is None
    model.apply(exit_line("a", 0))
    stopped = judging.verdict(model, stopping=True)
    assert stopped is not None and stopped.state is RunState.STOPPED


def test_without_step_events_a_silent_host_fails_the_run_while_another_answers() -> None:
    clock = Clock()
    model = RunModel(_record(), clock=clock)
    model.apply(Heartbeat("b", 1.0, {1: True}))
    model.apply(HostSilent("a", 12.0, "no answer"))
    verdict = verdict_of(model)
    assert "a (node 0) stopped answering" in verdict.detail
    assert "stopped stepping" not in verdict.detail
    model.apply(HostBack("a"))
    assert judging.verdict(model) is None
    # b not heard from lately either: its link may be going too; nothing to judge by.
    model.apply(HostSilent("a", 12.0, "no answer"))
    clock.now += 5.5
    assert judging.verdict(model) is None


@pytest.mark.parametrize("said", [4, 3], ids=["every-rank", "three-of-four"])
def test_a_crash_on_the_way_out_after_every_rank_completed_is_a_completion(said: int) -> None:
    # gloo's teardown at exit aborts now and then ("terminate called without an active
    # exception"): the training and its last checkpoint are whole by then.
    clock = Clock()
    model = started(RunModel(_record(), clock=clock))
    for rank in range(said):
        line = event_json("done", rank, step=120, reason="completed")
        model.apply(FileLine("ab"[rank // 2], f"events/rank{rank}.jsonl", 2, line))
    model.apply(exit_line("b", 134))
    clock.now += 3.0
    if said < 4:
        # A rank that never said so may have died in its training: a failure.
        assert verdict_of(model).state is RunState.FAILED
        return
    assert judging.verdict(model) is None, "torchrun on a has not exited yet"
    model.apply(exit_line("a", 0))
    verdict = verdict_of(model)
    assert verdict.state is RunState.COMPLETED
    assert verdict.detail == (
        "every rank completed its training, then torchrun on b (node 1) was killed by SIGABRT "
        "(exit 134): a crash on the way out, the training and its last checkpoint whole"
    )


def test_a_silent_host_that_alone_stepped_is_not_said_to_have_peers_that_stopped() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock))
    model.apply(step_line("a", 0, 1))
    model.apply(HostSilent("a", 12.0, "no answer"))
    model.apply(Heartbeat("b", clock.now, {1: True}))
    verdict = verdict_of(model)
    assert "a (node 0) stopped answering" in verdict.detail
    assert "stopped stepping" not in verdict.detail


def test_a_silent_host_whose_peers_keep_stepping_trains_on_until_they_stop() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock))
    model.apply(step_line("b", 2, 1))
    model.apply(HostSilent("a", 12.0, "no answer"))
    # The collectives of b's ranks need a's: while b steps, a trains; only its link is down.
    assert judging.verdict(model) is None
    note = model.silence_note(model.nodes["a"])
    assert note is not None and "its peers keep stepping, so it still trains" in note
    for step in range(2, 20):
        clock.now += 1.0
        model.apply(step_line("b", 2, step))
        assert judging.verdict(model) is None
    # b stops stepping: the collective waits for a. b's heartbeats go on.
    for _ in range(5):
        clock.now += 2.0
        model.apply(Heartbeat("b", clock.now, {1: True}))
        assert judging.verdict(model) is None, "failed within the 10 s window"
    clock.now += 1.0
    assert judging.verdict(model) is None, "failed before b was heard from after the window"
    model.apply(Heartbeat("b", clock.now, {1: True}))
    verdict = verdict_of(model)
    assert verdict.state is RunState.FAILED and verdict.host == "a"
    assert "a (node 0) stopped answering" in verdict.detail
    assert "the other hosts' ranks stopped stepping too" in verdict.detail


def test_a_host_silent_after_its_torchrun_exited_0_does_not_fail_the_run() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock))
    model.apply(step_line("b", 2, 1))
    model.apply(exit_line("a", 0))
    model.apply(HostSilent("a", 12.0, "no answer"))
    # b's ranks write their last checkpoint: no step for a long while, b still answers.
    clock.now += 60.0
    model.apply(Heartbeat("b", clock.now, {1: True}))
    assert judging.verdict(model) is None
    model.apply(exit_line("b", 0))
    assert verdict_of(model).state is RunState.COMPLETED


def test_the_peers_window_scales_with_the_slowest_rank_s_step_events() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock))
    # One event every 10 steps of 2 s: 20 s between events, so 60 s without one is a stall.
    for step in (10, 20):
        model.apply(step_line("b", 3, step, step_time_s=2.0))
    model.apply(HostSilent("a", 12.0, "no answer"))
    clock.now += 59.0
    model.apply(Heartbeat("b", clock.now, {1: True}))
    assert judging.verdict(model) is None
    clock.now += 2.0
    model.apply(Heartbeat("b", clock.now, {1: True}))
    assert judging.verdict(model) is not None


def test_with_no_host_answering_or_the_others_finished_the_run_is_not_judged() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock))
    model.apply(step_line("b", 2, 1))
    model.apply(HostSilent("a", 12.0, "no answer"))
    model.apply(HostSilent("b", 12.0, "timed out"))
    clock.now += 600.0
    # The head node's own network, most likely: every host's run may go on.
    assert judging.verdict(model) is None
    note = model.silence_note(model.nodes["a"])
    assert note is not None and "the head node's own network?" in note
    model.apply(HostBack("b"))
    model.apply(exit_line("b", 0))
    # b finished cleanly: a, silent, may have finished too; wait for it to say so.
    model.apply(Heartbeat("b", clock.now, {1: False}))
    assert judging.verdict(model) is None
    note = model.silence_note(model.nodes["a"])
    assert note is not None and note.endswith("nothing shows yet whether it still trains")
    model.apply(HostBack("a"))
    model.apply(exit_line("a", 0))
    assert verdict_of(model).state is RunState.COMPLETED


def test_processes_gone_without_an_exit_status_fail_after_two_heartbeats() -> None:
    model = RunModel(_record())
    model.apply(Heartbeat("b", 1.0, {1: False}))
    assert judging.verdict(model) is None
    model.apply(Heartbeat("b", 3.0, {1: False}))
    verdict = verdict_of(model)
    assert "gone without an exit status" in verdict.detail


def test_only_this_attempt_s_files_count() -> None:
    clock = Clock()
    model = RunModel(_record(attempts=2), clock=clock)
    model.apply(exit_line("a", 1, attempt=1))
    model.apply(exit_line("b", 1, attempt=1))
    assert judging.verdict(model) is None
    # Attempt 1's ranks stopped on request; attempt 2's have not said so yet.
    for rank in range(4):
        model.apply(
            FileLine(
                "a" if rank < 2 else "b",
                f"events/rank{rank}.jsonl",
                1,
                event_json("start", rank, start_step=0),
            )
        )
        model.apply(
            FileLine(
                "a" if rank < 2 else "b",
                f"events/rank{rank}.jsonl",
                2,
                event_json("done", rank, step=5, reason="stopped"),
            )
        )
    for rank in range(4):
        model.apply(
            FileLine(
                "a" if rank < 2 else "b",
                f"events/rank{rank}.jsonl",
                3,
                event_json("start", rank, start_step=5),
            )
        )
    model.apply(exit_line("a", 1, attempt=2))
    clock.now += 3.0
    verdict = verdict_of(model)
    assert verdict.state is RunState.FAILED


def test_the_verdict_names_the_node_of_the_root_cause_even_when_a_peer_s_exit_comes_first() -> None:
    clock = Clock()
    model = RunModel(_record(), clock=clock)
    # Rank 1 (node a) is SIGKILLed; torchrun on b ends its ranks, and b's exit arrives first.
    model.apply(FileLine("b", "logs/attempt-1/x_y/attempt_0/0/stderr.log", 10,
                         "RuntimeError: Connection closed by peer [10.0.0.1]:41234"))  # fmt: skip
    model.apply(exit_line("b", 1))
    assert judging.verdict(model) is None, "judged on a consequence"
    clock.now += 0.5
    model.apply(FileLine("a", "node/attempt-1.out", 100,
                         "exitcode  : -9 (pid: 4242)"))  # fmt: skip
    killed = json.dumps({"message": "Signal 9 (SIGKILL) received by PID 4242"})
    model.apply(FileLine("a", "logs/attempt-1/x_y/attempt_0/1/error.json", 10, killed))
    clock.now += 0.5
    model.apply(exit_line("a", 1))
    verdict = verdict_of(model)
    assert verdict.host == "a", verdict
    assert verdict.detail.startswith("torchrun on a (node 0) exited 1; first failure: rank 1 on a")


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
