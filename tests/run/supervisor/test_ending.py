"""How a followed attempt ended (ddptui/run/supervisor/ending.py's verdict), on a RunModel fed
what two hosts send."""

from __future__ import annotations

import json

import pytest

from ddptui.run.following.model import RunModel
from ddptui.run.following.state import RANKS_GONE_LINGER_S
from ddptui.run.following.updates import FileLine, Heartbeat, HostBack, HostSilent
from ddptui.run.record import RunState
from ddptui.run.supervisor import ending
from tests.run.bed import two_host_record
from tests.run.modelkit import Clock, beat, event_json, exit_line, started, step_line, verdict_of

_record = two_host_record


def test_every_node_exiting_0_completes() -> None:
    model = RunModel(_record())
    model.apply(exit_line("a", 0))
    assert ending.verdict(model) is None
    model.apply(exit_line("b", 0))
    assert verdict_of(model).state is RunState.COMPLETED


def test_a_non_zero_exit_fails_naming_the_node_and_the_signal() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock))
    model.apply(exit_line("b", 137))
    # Nothing says why yet: a root cause may be a moment behind the exit.
    assert ending.verdict(model) is None
    clock.now += 3.0
    verdict = verdict_of(model)
    assert verdict.state is RunState.FAILED and verdict.host == "b"
    assert "torchrun on b (node 1) was killed by SIGKILL (exit 137)" in verdict.detail
    # The same exit during a stop is the stop's doing.
    stopped = ending.verdict(model, stopping=True)
    assert stopped is None
    model.apply(exit_line("a", 0))
    stopped = ending.verdict(model, stopping=True)
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
    assert ending.verdict(model) is None
    # b not heard from lately either: its link may be going too; nothing to judge by.
    model.apply(HostSilent("a", 12.0, "no answer"))
    clock.now += 5.5
    assert ending.verdict(model) is None


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
    assert ending.verdict(model) is None, "torchrun on a has not exited yet"
    model.apply(exit_line("a", 0))
    verdict = verdict_of(model)
    assert verdict.state is RunState.COMPLETED
    assert verdict.detail == (
        "every rank completed its training, then torchrun on b (node 1) was killed by SIGABRT "
        "(exit 134): a crash on the way out, the training and its last checkpoint whole"
    )


@pytest.mark.parametrize("said", ["completed", "stopped"])
def test_a_launcher_left_by_every_rank_of_a_completed_run_ends_it_after_the_linger(
    said: str,
) -> None:
    # Node b's torchrun fails on the way out; node a's then waits in torch's exit barrier for
    # it, for up to 300 s, with none of its ranks left.
    clock = Clock()
    model = started(RunModel(_record(), clock=clock))
    for rank in range(4):
        line = event_json("done", rank, step=120, reason=said)
        model.apply(FileLine("ab"[rank // 2], f"events/rank{rank}.jsonl", 2, line))
    model.apply(beat("a", clock, {0: ("S", 0.0), 1: ("S", 0.0)}))
    model.apply(exit_line("b", 134))
    clock.now += 3.0
    model.apply(beat("a", clock, {}))
    clock.now += RANKS_GONE_LINGER_S - 1.0
    model.apply(beat("a", clock, {}))
    assert ending.verdict(model) is None, "a's torchrun may exit by itself yet"
    clock.now += 1.0
    if said == "stopped":
        # A stop's launchers are the stop's to end (ddptui/run/stopper.py).
        assert ending.verdict(model) is None
        return
    verdict = verdict_of(model)
    assert verdict.state is RunState.COMPLETED
    assert verdict.detail.endswith(
        "a crash on the way out, the training and its last checkpoint whole; torchrun outlived "
        "every rank on a (its exit barrier waits for a node that failed): ended"
    )
    assert model.nodes["a"].launcher_outlived(clock.now)
    # A heartbeat that names a rank of the node again: it has not outlived them.
    model.apply(beat("a", clock, {0: ("R", 90.0)}))
    assert ending.verdict(model) is None


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
    assert ending.verdict(model) is None
    note = model.silence_note(model.nodes["a"])
    assert note is not None and "its peers keep stepping, so it still trains" in note
    for step in range(2, 20):
        clock.now += 1.0
        model.apply(step_line("b", 2, step))
        assert ending.verdict(model) is None
    # b stops stepping: the collective waits for a. b's heartbeats go on.
    for _ in range(5):
        clock.now += 2.0
        model.apply(Heartbeat("b", clock.now, {1: True}))
        assert ending.verdict(model) is None, "failed within the 10 s window"
    clock.now += 1.0
    assert ending.verdict(model) is None, "failed before b was heard from after the window"
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
    assert ending.verdict(model) is None
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
    assert ending.verdict(model) is None
    clock.now += 2.0
    model.apply(Heartbeat("b", clock.now, {1: True}))
    assert ending.verdict(model) is not None


def test_with_no_host_answering_or_the_others_finished_the_run_is_not_judged() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock))
    model.apply(step_line("b", 2, 1))
    model.apply(HostSilent("a", 12.0, "no answer"))
    model.apply(HostSilent("b", 12.0, "timed out"))
    clock.now += 600.0
    # The head node's own network, most likely: every host's run may go on.
    assert ending.verdict(model) is None
    note = model.silence_note(model.nodes["a"])
    assert note is not None and "the head node's own network?" in note
    model.apply(HostBack("b"))
    model.apply(exit_line("b", 0))
    # b finished cleanly: a, silent, may have finished too; wait for it to say so.
    model.apply(Heartbeat("b", clock.now, {1: False}))
    assert ending.verdict(model) is None
    note = model.silence_note(model.nodes["a"])
    assert note is not None and note.endswith("nothing shows yet whether it still trains")
    model.apply(HostBack("a"))
    model.apply(exit_line("a", 0))
    assert verdict_of(model).state is RunState.COMPLETED


def test_processes_gone_without_an_exit_status_fail_after_two_heartbeats() -> None:
    model = RunModel(_record())
    model.apply(Heartbeat("b", 1.0, {1: False}))
    assert ending.verdict(model) is None
    model.apply(Heartbeat("b", 3.0, {1: False}))
    verdict = verdict_of(model)
    assert "gone without an exit status" in verdict.detail


def test_only_this_attempt_s_files_count() -> None:
    clock = Clock()
    model = RunModel(_record(attempts=2), clock=clock)
    model.apply(exit_line("a", 1, attempt=1))
    model.apply(exit_line("b", 1, attempt=1))
    assert ending.verdict(model) is None
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
    assert ending.verdict(model) is None, "judged on a consequence"
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
