"""RunModel: followed lines become node and rank state, the rank table a verdict leaves, and
what status says of them. Judging the attempt is tests/run/supervisor/test_judging.py."""

from __future__ import annotations

import json

import pytest

from ddptui.run.diagnose import Category
from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Steps
from ddptui.run.following.updates import FileLine, HostSilent
from ddptui.run.record import RunRecord, RunState
from ddptui.run.supervisor import judging
from tests.run.bed import two_host_record
from tests.run.modelkit import Clock, beat, event_json, exit_line, started, step_line, verdict_of

_record = two_host_record


def test_once_the_run_failed_no_rank_reads_running_beside_the_verdict() -> None:
    clock = Clock()
    model = started(RunModel(_record(), clock=clock))
    for rank in range(4):
        model.apply(step_line("ab"[rank // 2], rank, 2))
    # Rank 3 is SIGKILLed; b's torchrun ends rank 2, a's ranks are ended after the verdict.
    # The table then says what the verdict does: rank 3 killed, its peers failed with it.
    killed = json.dumps({"message": "Signal 9 (SIGKILL) received by PID 4242"})
    model.apply(FileLine("b", "logs/attempt-1/x_y/attempt_0/1/error.json", 10, killed))
    model.apply(exit_line("b", 1))
    verdict = verdict_of(model)
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
    model.apply(FileLine("a", "events/rank0.jsonl", 3, event_json("done", 0, step=2)))
    assert model.progress.ranks[0].state.value == "done"


def test_rank_logs_map_to_global_ranks_and_garbage_is_counted() -> None:
    model = RunModel(_record())
    model.apply(FileLine("b", "logs/attempt-1/x_y/attempt_0/1/stderr.log", 10, "boom"))
    assert [entry.text for entry in model.logs[3]] == ["boom"]
    model.apply(FileLine("a", "events/rank0.jsonl", 5, "{not json"))
    assert model.events.garbled == 1
    model.apply(FileLine("a", "events/rank0.jsonl", 9, event_json("step", 0, step=3, loss=0.5)))
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

    model = started(RunModel(_record()))
    model.apply(step_line("b", 2, 1))
    model.apply(HostSilent("a", 12.0, "connect timed out"))
    view = RunView.of(model.record, model, model.judgement(model.record))
    note = "no answer for 12 s (connect timed out); its peers keep stepping, so it still trains"
    lines = [line.plain for line in status_lines(view)]
    assert f"  node 0 a: 2 rank(s), not answering ({note})" in lines
    assert view.document()["nodes"][0]["not_answering"] == note


def test_a_watch_that_reads_only_the_latest_steps_says_the_same_once_it_looks() -> None:
    clock = Clock()
    every = started(RunModel(_record(), clock=clock, wall=clock))
    latest = started(RunModel(_record(), clock=clock, wall=clock, steps=Steps.LATEST))
    none = started(RunModel(_record(), clock=clock, wall=clock, steps=Steps.NONE))
    lines = [step_line("ab"[rank // 2], rank, step) for step in range(1, 11) for rank in range(4)]
    lines.append(
        FileLine("a", "events/rank0.jsonl", 99, event_json("done", 0, step=10, reason="completed"))
    )
    lines.append(FileLine("b", "events/rank3.jsonl", 99, event_json("error", 3, message="boom")))
    for line in lines:
        for model in (every, latest, none):
            model.apply(line)
    # Arriving steps count at once (for hangs and silences); their numbers once it looks.
    assert latest.attempt_steps > 0 and judging.hang(latest) is None
    assert latest.progress.rank(2).step == 0  # type: ignore[union-attr]
    latest.read_steps()
    every.read_steps()
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

    clock = Clock()
    model = RunModel(_record(), clock, clock)
    record = model.record
    for state in (RunState.STAGING, RunState.STARTING, RunState.RUNNING):
        record.transition(state, state.value, 0.0)
    assert "starting (0 of 4 ranks started)" in model.progress.format_line()
    # Their processes run: the ranks run, whatever they write.
    model.apply(beat("a", clock, {0: ("S", 90.0), 1: ("R", 99.0)}))
    model.apply(beat("b", clock, {2: ("R", 98.0), 3: ("R", 97.0)}))
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
    model.apply(FileLine("a", "events/rank0.jsonl", 1, event_json("start", 0, start_step=0)))
    assert model.progress.ranks[0].state.value == "running"
    model.apply(step_line("a", 0, 5))
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
        start = event_json("start", rank, start_step=40, resumed_from=checkpoint)
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
