"""RunModel: followed lines become node and rank state, and a verdict on how the attempt ended."""

from __future__ import annotations

import json

import pytest

from ddptui.run.diagnose import Category
from ddptui.run.follow import FileLine, Heartbeat, HostBack, HostSilent
from ddptui.run.model import RunModel
from ddptui.run.record import RunRecord, RunState
from ddptui.run.state import Steps, Verdict
from ddptui.run.supervisor import judging
from tests.run.bed import two_host_record

_record = two_host_record


def _event(kind: str, rank: int, **fields: object) -> str:
    common = {"v": 1, "type": kind, "rank": rank, "local_rank": rank % 2}
    common.update({"node_rank": rank // 2, "world_size": 4, "time": 100.0 + rank})
    return json.dumps({**common, **fields})


def _exit(host: str, status: int, attempt: int = 1) -> FileLine:
    return FileLine(host, f"node/attempt-{attempt}.exit", 2, str(status))


def _verdict(model: RunModel) -> Verdict:
    """Judging's verdict now, which there must be."""
    verdict = judging.verdict(model)
    assert verdict is not None
    return verdict


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_every_node_exiting_0_completes() -> None:
    model = RunModel(_record())
    model.apply(_exit("a", 0))
    assert judging.verdict(model) is None
    model.apply(_exit("b", 0))
    assert _verdict(model).state is RunState.COMPLETED


def test_a_non_zero_exit_fails_naming_the_node_and_the_signal() -> None:
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock))
    model.apply(_exit("b", 137))
    # Nothing says why yet: a root cause may be a moment behind the exit.
    assert judging.verdict(model) is None
    clock.now += 3.0
    verdict = _verdict(model)
    assert verdict.state is RunState.FAILED and verdict.host == "b"
    assert "torchrun on b (node 1) was killed by SIGKILL (exit 137)" in verdict.detail
    # The same exit during a stop is the stop's doing.
    stopped = judging.verdict(model, stopping=True)
    assert stopped is None
    model.apply(_exit("a", 0))
    stopped = judging.verdict(model, stopping=True)
    assert stopped is not None and stopped.state is RunState.STOPPED


def _step(host: str, rank: int, step: int, step_time_s: float = 0.1) -> FileLine:
    line = _event("step", rank, step=step, loss=1.0, step_time_s=step_time_s)
    return FileLine(host, f"events/rank{rank}.jsonl", step, line)


def _started(model: RunModel) -> RunModel:
    """Every rank's start event, as each attempt of the trainer writes first."""
    for rank in range(4):
        line = _event("start", rank, start_step=0)
        model.apply(FileLine("ab"[rank // 2], f"events/rank{rank}.jsonl", 1, line))
    return model


def test_without_step_events_a_silent_host_fails_the_run_while_another_answers() -> None:
    clock = _Clock()
    model = RunModel(_record(), clock=clock)
    model.apply(Heartbeat("b", 1.0, {1: True}))
    model.apply(HostSilent("a", 12.0, "no answer"))
    verdict = _verdict(model)
    assert "a (node 0) stopped answering" in verdict.detail
    assert "stopped stepping" not in verdict.detail
    model.apply(HostBack("a"))
    assert judging.verdict(model) is None
    # b not heard from lately either: its link may be going too; nothing to judge by.
    model.apply(HostSilent("a", 12.0, "no answer"))
    clock.now += 5.5
    assert judging.verdict(model) is None


def test_a_silent_host_that_alone_stepped_is_not_said_to_have_peers_that_stopped() -> None:
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock))
    model.apply(_step("a", 0, 1))
    model.apply(HostSilent("a", 12.0, "no answer"))
    model.apply(Heartbeat("b", clock.now, {1: True}))
    verdict = _verdict(model)
    assert "a (node 0) stopped answering" in verdict.detail
    assert "stopped stepping" not in verdict.detail


def test_a_silent_host_whose_peers_keep_stepping_trains_on_until_they_stop() -> None:
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock))
    model.apply(_step("b", 2, 1))
    model.apply(HostSilent("a", 12.0, "no answer"))
    # The collectives of b's ranks need a's: while b steps, a trains; only its link is down.
    assert judging.verdict(model) is None
    note = model.silence_note(model.nodes["a"])
    assert note is not None and "its peers keep stepping, so it still trains" in note
    for step in range(2, 20):
        clock.now += 1.0
        model.apply(_step("b", 2, step))
        assert judging.verdict(model) is None
    # b stops stepping: the collective waits for a. b's heartbeats go on.
    for _ in range(5):
        clock.now += 2.0
        model.apply(Heartbeat("b", clock.now, {1: True}))
        assert judging.verdict(model) is None, "failed within the 10 s window"
    clock.now += 1.0
    assert judging.verdict(model) is None, "failed before b was heard from after the window"
    model.apply(Heartbeat("b", clock.now, {1: True}))
    verdict = _verdict(model)
    assert verdict.state is RunState.FAILED and verdict.host == "a"
    assert "a (node 0) stopped answering" in verdict.detail
    assert "the other hosts' ranks stopped stepping too" in verdict.detail


def test_a_host_silent_after_its_torchrun_exited_0_does_not_fail_the_run() -> None:
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock))
    model.apply(_step("b", 2, 1))
    model.apply(_exit("a", 0))
    model.apply(HostSilent("a", 12.0, "no answer"))
    # b's ranks write their last checkpoint: no step for a long while, b still answers.
    clock.now += 60.0
    model.apply(Heartbeat("b", clock.now, {1: True}))
    assert judging.verdict(model) is None
    model.apply(_exit("b", 0))
    assert _verdict(model).state is RunState.COMPLETED


def test_the_peers_window_scales_with_the_slowest_rank_s_step_events() -> None:
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock))
    # One event every 10 steps of 2 s: 20 s between events, so 60 s without one is a stall.
    for step in (10, 20):
        model.apply(_step("b", 3, step, step_time_s=2.0))
    model.apply(HostSilent("a", 12.0, "no answer"))
    clock.now += 59.0
    model.apply(Heartbeat("b", clock.now, {1: True}))
    assert judging.verdict(model) is None
    clock.now += 2.0
    model.apply(Heartbeat("b", clock.now, {1: True}))
    assert judging.verdict(model) is not None


def test_with_no_host_answering_or_the_others_finished_the_run_is_not_judged() -> None:
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock))
    model.apply(_step("b", 2, 1))
    model.apply(HostSilent("a", 12.0, "no answer"))
    model.apply(HostSilent("b", 12.0, "timed out"))
    clock.now += 600.0
    # The head node's own network, most likely: every host's run may go on.
    assert judging.verdict(model) is None
    note = model.silence_note(model.nodes["a"])
    assert note is not None and "the head node's own network?" in note
    model.apply(HostBack("b"))
    model.apply(_exit("b", 0))
    # b finished cleanly: a, silent, may have finished too; wait for it to say so.
    model.apply(Heartbeat("b", clock.now, {1: False}))
    assert judging.verdict(model) is None
    note = model.silence_note(model.nodes["a"])
    assert note is not None and note.endswith("nothing shows yet whether it still trains")
    model.apply(HostBack("a"))
    model.apply(_exit("a", 0))
    assert _verdict(model).state is RunState.COMPLETED


def test_processes_gone_without_an_exit_status_fail_after_two_heartbeats() -> None:
    model = RunModel(_record())
    model.apply(Heartbeat("b", 1.0, {1: False}))
    assert judging.verdict(model) is None
    model.apply(Heartbeat("b", 3.0, {1: False}))
    verdict = _verdict(model)
    assert "gone without an exit status" in verdict.detail


def test_only_this_attempt_s_files_count() -> None:
    clock = _Clock()
    model = RunModel(_record(attempts=2), clock=clock)
    model.apply(_exit("a", 1, attempt=1))
    model.apply(_exit("b", 1, attempt=1))
    assert judging.verdict(model) is None
    # Attempt 1's ranks stopped on request; attempt 2's have not said so yet.
    for rank in range(4):
        model.apply(
            FileLine(
                "a" if rank < 2 else "b",
                f"events/rank{rank}.jsonl",
                1,
                _event("start", rank, start_step=0),
            )
        )
        model.apply(
            FileLine(
                "a" if rank < 2 else "b",
                f"events/rank{rank}.jsonl",
                2,
                _event("done", rank, step=5, reason="stopped"),
            )
        )
    for rank in range(4):
        model.apply(
            FileLine(
                "a" if rank < 2 else "b",
                f"events/rank{rank}.jsonl",
                3,
                _event("start", rank, start_step=5),
            )
        )
    model.apply(_exit("a", 1, attempt=2))
    clock.now += 3.0
    verdict = _verdict(model)
    assert verdict.state is RunState.FAILED


def test_the_verdict_names_the_node_of_the_root_cause_even_when_a_peer_s_exit_comes_first() -> None:
    clock = _Clock()
    model = RunModel(_record(), clock=clock)
    # Rank 1 (node a) is SIGKILLed; torchrun on b ends its ranks, and b's exit arrives first.
    model.apply(FileLine("b", "logs/attempt-1/x_y/attempt_0/0/stderr.log", 10,
                         "RuntimeError: Connection closed by peer [10.0.0.1]:41234"))  # fmt: skip
    model.apply(_exit("b", 1))
    assert judging.verdict(model) is None, "judged on a consequence"
    clock.now += 0.5
    model.apply(FileLine("a", "node/attempt-1.out", 100,
                         "exitcode  : -9 (pid: 4242)"))  # fmt: skip
    killed = json.dumps({"message": "Signal 9 (SIGKILL) received by PID 4242"})
    model.apply(FileLine("a", "logs/attempt-1/x_y/attempt_0/1/error.json", 10, killed))
    clock.now += 0.5
    model.apply(_exit("a", 1))
    verdict = _verdict(model)
    assert verdict.host == "a", verdict
    assert verdict.detail.startswith("torchrun on a (node 0) exited 1; first failure: rank 1 on a")


def test_once_the_run_failed_no_rank_reads_running_beside_the_verdict() -> None:
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock))
    for rank in range(4):
        model.apply(_step("ab"[rank // 2], rank, 2))
    # Rank 3 is SIGKILLed; b's torchrun ends rank 2, a's ranks are ended after the verdict.
    # The table then says what the verdict does: rank 3 killed, its peers failed with it.
    killed = json.dumps({"message": "Signal 9 (SIGKILL) received by PID 4242"})
    model.apply(FileLine("b", "logs/attempt-1/x_y/attempt_0/1/error.json", 10, killed))
    model.apply(_exit("b", 1))
    verdict = _verdict(model)
    assert verdict.state is RunState.FAILED
    assert [rank.state.value for rank in model.progress.ranks] == ["running"] * 4
    model.conclude(verdict.state)
    assert [rank.state.value for rank in model.progress.ranks] == [
        "failed",
        "failed",
        "failed",
        "killed",
    ]
    assert "3 failed, 1 killed" in model.progress.format_line()
    # A rank's own word on how it ended, late as it may come, stands.
    model.apply(FileLine("a", "events/rank0.jsonl", 3, _event("done", 0, step=2)))
    assert model.progress.ranks[0].state.value == "done"


def test_rank_logs_map_to_global_ranks_and_garbage_is_counted() -> None:
    model = RunModel(_record())
    model.apply(FileLine("b", "logs/attempt-1/x_y/attempt_0/1/stderr.log", 10, "boom"))
    assert [entry.text for entry in model.logs[3]] == ["boom"]
    model.apply(FileLine("a", "events/rank0.jsonl", 5, "{not json"))
    assert model.events.garbled == 1
    model.apply(FileLine("a", "events/rank0.jsonl", 9, _event("step", 0, step=3, loss=0.5)))
    rank = model.progress.rank(0)
    assert rank is not None and rank.step == 3 and rank.loss == 0.5


def test_torchrun_told_to_stop_is_a_consequence_never_the_first_failure() -> None:
    from ddptui.run.diagnose import Category, Diagnoser, LogLine

    diagnoser = Diagnoser()
    for text in (
        "Traceback (most recent call last):",
        '  File "run.py", line 1, in <module>',
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15",
    ):
        diagnoser.feed(LogLine("a", 0, None, "torchrun", 1.0, text))
    assert [d.category for d in diagnoser.diagnoses()] == [Category.TERMINATED]
    assert diagnoser.first_failure() is None


@pytest.mark.parametrize("asked", [True, False])
def test_what_a_stop_someone_asked_for_causes_is_no_error(asked: bool) -> None:
    """A stop is clean: torchrun told to stop and a rank whose peer it ended first are the
    stop; what went wrong before it was asked for is still an error."""
    now = [1000.0]
    record = _record()
    for state in (RunState.STAGING, RunState.STARTING, RunState.RUNNING):
        record.transition(state, now=now[0])
    model = RunModel(record, clock=lambda: now[0], wall=lambda: now[0])
    model.apply(FileLine("b", "logs/attempt-1/x_y/attempt_0/0/stderr.log", 10,
                         "RuntimeError: CUDA out of memory"))  # fmt: skip
    now[0] += 30
    record.transition(RunState.STOPPING if asked else RunState.FAILED, now=now[0])
    now[0] += 2
    for text in (
        "Traceback (most recent call last):",
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15",
    ):
        model.apply(FileLine("a", "node/attempt-1.out", 10, text))
    lost = (
        "RuntimeError: [../gloo/transport/tcp/pair.cc:537] Connection closed by peer [10.0.0.2]:1"
    )
    model.apply(FileLine("a", "logs/attempt-1/x_y/attempt_0/1/stderr.log", 10, lost))
    shown = [diagnosis.category for diagnosis in model.diagnoses()]
    assert (Category.TERMINATED in shown) is not asked
    assert len(shown) == (1 if asked else 3), shown
    assert Category.CUDA_OOM in shown


def test_status_says_what_a_silent_host_means_for_the_run() -> None:
    from ddptui.present.status import status_lines
    from ddptui.run.view import RunView

    model = _started(RunModel(_record()))
    model.apply(_step("b", 2, 1))
    model.apply(HostSilent("a", 12.0, "connect timed out"))
    view = RunView.of(model.record, model, model.judgement(model.record))
    note = "no answer for 12 s (connect timed out); its peers keep stepping, so it still trains"
    lines = [line.plain for line in status_lines(view)]
    assert f"  node 0 a: 2 rank(s), not answering ({note})" in lines
    assert view.document()["nodes"][0]["not_answering"] == note


def _beat(host: str, clock: _Clock, ranks: dict[int, tuple[str, float]]) -> Heartbeat:
    sample = {"ranks": {rank: {"state": s, "cpu_pct": cpu} for rank, (s, cpu) in ranks.items()}}
    return Heartbeat(host, clock.now, {1: True}, sample)


def test_a_run_whose_answering_hosts_all_stop_stepping_hangs_naming_the_stopped_rank() -> None:
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock, wall=clock))
    for step in range(1, 4):
        clock.now += 0.1
        for rank in range(4):
            model.apply(_step("ab"[rank // 2], rank, step))
    # Rank 3's process is stopped; the others wait for it in a collective.
    for second in range(19):
        clock.now += 1.0
        model.apply(_beat("a", clock, {0: ("S", 1.0), 1: ("S", 1.0)}))
        model.apply(_beat("b", clock, {2: ("S", 1.0), 3: ("T", 0.0)}))
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
    model.apply(_step("a", 0, 4))
    assert judging.hang(model) is None


@pytest.mark.parametrize("last_word", ["done", "error"])
def test_ranks_that_said_they_are_done_are_never_hung_while_their_processes_exit(
    last_word: str,
) -> None:
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock, wall=clock))
    for rank in range(4):
        model.apply(_step("ab"[rank // 2], rank, 3))
    for rank in (0, 1, 2):
        line = _event("done", rank, step=3, reason="completed")
        model.apply(FileLine("ab"[rank // 2], f"events/rank{rank}.jsonl", 4, line))
    clock.now += 60.0
    model.apply(_beat("a", clock, {0: ("S", 0.0), 1: ("S", 0.0)}))
    model.apply(_beat("b", clock, {2: ("S", 0.0), 3: ("S", 0.0)}))
    # Rank 3 has not said it is done: its host is still judged.
    hang = judging.hang(model)
    assert hang is not None and hang.step == 3
    fields = {"step": 3} if last_word == "done" else {"message": "RuntimeError: NCCL error"}
    model.apply(FileLine("b", "events/rank3.jsonl", 4, _event(last_word, 3, **fields)))
    clock.now += 600.0
    # A rank that raised may hang in its exit (an NCCL communicator that never aborts).
    assert (judging.hang(model) is None) == (last_word == "done")


def test_the_hang_window_follows_the_slowest_rank_or_the_hosts_file() -> None:
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock, wall=clock))
    for step in (10, 20):
        model.apply(_step("b", 2, step, step_time_s=0.5))
    # One event every 10 steps of 0.5 s: 5 s between events, so 10 of them are 50 s.
    assert judging.hang_window(model) == 50.0
    assert judging.hang_window(model, 12.5) == 12.5
    clock.now += 49.0
    assert judging.hang(model) is None and judging.hang(model, 12.5) is not None


def _phase(host: str, rank: int, phase: str, **fields: object) -> FileLine:
    return FileLine(
        host, f"events/rank{rank}.jsonl", 50, _event("phase", rank, phase=phase, **fields)
    )


def test_a_phase_stretches_the_window_until_it_ends_and_a_hang_in_it_says_so() -> None:
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock, wall=clock))
    for rank in range(4):
        model.apply(_step("ab"[rank // 2], rank, 10))
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
    model.apply(_step("b", 3, 11))
    assert model.progress.ranks[3].phase is None


def test_a_rank_stopped_in_a_phase_is_hung_after_the_training_window() -> None:
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock, wall=clock))
    for rank in range(4):
        model.apply(_step("ab"[rank // 2], rank, 10))
    # Every rank enters a checkpoint save; rank 3 is SIGSTOPped in it and the others wait.
    for rank in range(4):
        model.apply(_phase("ab"[rank // 2], rank, "checkpoint"))
    model.apply(_beat("a", clock, {0: ("S", 1.0), 1: ("S", 1.0)}))
    model.apply(_beat("b", clock, {2: ("S", 1.0), 3: ("R", 90.0)}))
    clock.now += judging.HANG_MIN_S + 1.0
    assert judging.hang(model) is None
    model.apply(_beat("b", clock, {2: ("S", 1.0), 3: ("T", 0.0)}))
    hang = judging.hang(model)
    assert hang is not None and hang.window_s == judging.HANG_MIN_S
    assert [(rank.rank, rank.process) for rank in hang.odd] == [(3, "T")]


def test_a_phase_before_the_first_step_keeps_the_start_s_window() -> None:
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock, wall=clock))
    model.apply(_phase("a", 0, "compile", expect_s=5))
    clock.now += judging.FIRST_STEP_HANG_S - 1.0
    assert judging.hang(model) is None


def _said(host: str, rank: int, text: str) -> FileLine:
    return FileLine(host, f"logs/attempt-1/tr/attempt_0/{rank % 2}/stdout.log", 1, text)


def test_a_script_without_events_hangs_once_quiet_and_idle_for_the_window() -> None:
    clock = _Clock()
    model = RunModel(_record(), clock=clock, wall=clock)
    idle = {0: ("S", 0.5), 1: ("S", 1.0)}
    # Nothing said yet (a rendezvous waits idle too): the start's window.
    clock.now += judging.FIRST_STEP_HANG_S - 1.0
    model.apply(_beat("a", clock, idle))
    model.apply(_beat("b", clock, {2: ("S", 0.0), 3: ("S", 0.0)}))
    assert judging.hang(model) is None
    model.apply(_said("a", 0, "epoch 0 batch 10 loss 2.3"))
    clock.now += judging.QUIET_HANG_S - 1.0
    model.apply(_beat("a", clock, idle))
    assert judging.hang(model) is None
    clock.now += 2.0
    # One rank busy (it computes, or spins in NCCL): nothing tells a hang apart.
    model.apply(_beat("b", clock, {2: ("R", 99.0), 3: ("S", 0.0)}))
    assert judging.hang(model) is None
    model.apply(_beat("b", clock, {2: ("S", 0.0), 3: ("T", 0.0)}))
    hang = judging.hang(model)
    assert hang is not None and hang.quiet and hang.window_s == judging.QUIET_HANG_S
    assert [(rank.rank, rank.process) for rank in hang.odd] == [(3, "T")]
    assert hang.summary(clock.now).startswith("no output and no CPU use for 301 s; rank 3 on b")
    assert judging.hang(model, 30.0) is not None
    # A line again: no longer hung.
    model.apply(_said("b", 2, "epoch 0 batch 20 loss 2.1"))
    assert judging.hang(model) is None


def test_only_what_tells_a_rank_apart_is_said() -> None:
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock, wall=clock))
    for rank in range(4):
        model.apply(_step("ab"[rank // 2], rank, 7 if rank != 1 else 6))
    clock.now += 31.0
    model.apply(_beat("a", clock, {0: ("R", 99.0), 1: ("S", 0.5)}))
    model.apply(_beat("b", clock, {2: ("R", 98.0)}))
    hang = judging.hang(model)
    assert hang is not None
    why = {rank.rank: rank.why for rank in hang.ranks}
    assert why[0] is None and why[2] is None
    assert why[1] == "idle (0% CPU) while its peers spin"
    assert why[3] == "no process of this rank is left on its host"


def _hung_at(steps: list[int], processes: dict[int, tuple[str, float]]) -> dict[int, str | None]:
    """What the hang says of each rank when the ranks' last step events said ``steps``."""
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock, wall=clock))
    for rank, last in enumerate(steps):
        for step in range(1, last + 1):
            model.apply(_step("ab"[rank // 2], rank, step))
    clock.now += 31.0
    for host in "ab":
        ranks = {rank: seen for rank, seen in processes.items() if "ab"[rank // 2] == host}
        model.apply(_beat(host, clock, ranks))
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
    clock = _Clock()
    model = _started(RunModel(_record(), clock=clock, wall=clock))
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
        resumed.apply(FileLine(host, f"events/rank{rank}.jsonl", 1, _event("start", rank)))
        resumed.apply(_step(host, rank, 5))
        resumed.apply(FileLine(host, f"events/rank{rank}.jsonl", 9, _event("start", rank)))
    assert [rank.state.value for rank in resumed.progress.ranks] == ["starting"] * 4
    clock.now += 100.0
    assert judging.hang(resumed) is None


def test_a_watch_that_reads_only_the_latest_steps_says_the_same_once_it_looks() -> None:
    clock = _Clock()
    every = _started(RunModel(_record(), clock=clock, wall=clock))
    latest = _started(RunModel(_record(), clock=clock, wall=clock, steps=Steps.LATEST))
    none = _started(RunModel(_record(), clock=clock, wall=clock, steps=Steps.NONE))
    lines = [_step("ab"[rank // 2], rank, step) for step in range(1, 11) for rank in range(4)]
    lines.append(
        FileLine("a", "events/rank0.jsonl", 99, _event("done", 0, step=10, reason="completed"))
    )
    lines.append(FileLine("b", "events/rank3.jsonl", 99, _event("error", 3, message="boom")))
    for line in lines:
        for model in (every, latest, none):
            model.apply(line)
    # Arriving steps count at once (for hangs and silences); their numbers once it looks.
    assert latest.attempt_steps > 0 and judging.hang(latest) is None
    assert latest.progress.rank(2).step == 0  # type: ignore[union-attr]
    latest.tick()
    every.tick()
    assert latest.progress.format_line() == every.progress.format_line()
    assert [(r.step, r.state) for r in latest.progress.ranks] == [
        (r.step, r.state) for r in every.progress.ranks
    ]
    # Reading no steps still reads what is not one: the error and the end.
    assert [r.state.value for r in none.progress.ranks] == [
        "done",
        "starting",
        "starting",
        "failed",
    ]
    assert [d.category.value for d in none.diagnoser.diagnoses()] == [
        d.category.value for d in every.diagnoser.diagnoses()
    ]


def test_a_script_without_events_runs_from_its_processes_and_shows_its_last_lines() -> None:
    from ddptui.present.status import status_lines
    from ddptui.run.view import RunView

    clock = _Clock()
    model = RunModel(_record(), clock, clock)
    record = model.record
    for state in (RunState.STAGING, RunState.STARTING, RunState.RUNNING):
        record.transition(state, state.value, 0.0)
    assert "starting (0 of 4 ranks started)" in model.progress.format_line()
    # Their processes run: the ranks run, whatever they write.
    model.apply(_beat("a", clock, {0: ("S", 90.0), 1: ("R", 99.0)}))
    model.apply(_beat("b", clock, {2: ("R", 98.0), 3: ("R", 97.0)}))
    assert [rank.state.value for rank in model.progress.ranks] == ["running"] * 4
    assert model.progress.format_line() == "4 rank(s) running, no step events yet (docs/events.md)"
    model.apply(FileLine("b", "logs/attempt-1/x_y/attempt_0/1/stdout.log", 10, "epoch 3 \x1b[2J"))
    clock.now += 12
    view = RunView.of(record, model, model.judgement(record))
    lines = [line.plain for line in status_lines(view, now=clock.now)]
    assert "  rank 3 on b, 12 s ago: epoch 3 \\x1b[2J" in lines
    assert "  rank 0 on a: no output yet" in lines
    # The loss as the script prints it, without a line of code for ddptui.
    model.apply(FileLine("b", "logs/attempt-1/x_y/attempt_0/1/stdout.log", 20, "step 7 loss 0.25"))
    model.apply(FileLine("b", "logs/attempt-1/x_y/attempt_0/0/stdout.log", 30, "{'loss': 0.5}"))
    assert [(r.step, r.loss) for r in model.progress.ranks[2:]] == [(1, 0.5), (7, 0.25)]
    assert model.progress.format_line().startswith("step 1  loss 0.25 / 0.375 / 0.5")
    # A rank that writes events later says it started, and runs on: never back to starting.
    model.apply(FileLine("a", "events/rank0.jsonl", 1, _event("start", 0, start_step=0)))
    assert model.progress.ranks[0].state.value == "running"
    model.apply(_step("a", 0, 5))
    assert "no step events" not in model.progress.format_line()


def test_a_run_s_own_loss_pattern_reads_its_output() -> None:
    record = _record()
    record.loss_pattern = r"obj\[(?P<step>\d+)\]=(?P<loss>\S+)"
    model = RunModel(record)
    model.apply(FileLine("a", "logs/attempt-1/x_y/attempt_0/1/stderr.log", 1, "obj[12]=0.5"))
    assert (model.progress.ranks[1].step, model.progress.ranks[1].loss) == (12, 0.5)
    assert RunRecord.from_toml(record.to_toml()).loss_pattern == record.loss_pattern


def test_status_says_which_checkpoint_a_resumed_attempt_started_from() -> None:
    from ddptui.present.status import status_lines
    from ddptui.run.view import RunView

    model = RunModel(_record())
    view = RunView.of(model.record, model, model.judgement(model.record))
    assert not any("resumed from" in line.plain for line in status_lines(view))
    # A host's text: shown with its control characters as visible escapes.
    checkpoint = "/runs/r/code/out/checkpoint-40\x1b]0;owned\x07"
    for rank in (1, 0):
        start = _event("start", rank, start_step=40, resumed_from=checkpoint)
        model.apply(FileLine("a" if rank < 2 else "b", f"events/rank{rank}.jsonl", 9, start))
    view = RunView.of(model.record, model, model.judgement(model.record))
    (said,) = [line.plain for line in status_lines(view) if "resumed from" in line.plain]
    assert said.strip() == (
        "resumed from /runs/r/code/out/checkpoint-40\\x1b]0;owned\\x07 after step 40 "
        "(rank 0's checkpoint)"
    )
    # Made plain as the event was read: every reader of the model gets the same safe text.
    assert view.document()["ranks"][0]["resumed_from"] == (
        "/runs/r/code/out/checkpoint-40\\x1b]0;owned\\x07"
    )
