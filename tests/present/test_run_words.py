"""The CLI and the console say the same words of the same run: ``ddptui status`` and the run
screen rendered from one recorded run (the H200 recordings' NCCL failure, a silent host), and
every state with its reason, a failure while staging included."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from textual.widgets import Static

from ddptui.present.runs import run_document, run_row
from ddptui.present.status import hang_lines, status_lines
from ddptui.run.control import RunControl
from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Hang, Judgement
from ddptui.run.following.updates import HostSilent
from ddptui.run.record import (
    Attempt,
    Incident,
    NodeRecord,
    RunRecord,
    RunState,
    SchedulerJob,
    SetAside,
)
from ddptui.run.timeline import Timeline
from ddptui.run.view import RunView
from ddptui.ui.app import DdptuiApp
from ddptui.ui.screens.run import RunScreen
from ddptui.ui.screens.runs import RunsScreen
from tests.ui import scenes


async def _console(model: RunModel) -> tuple[str, str]:
    """The run screen's status line and errors pane, as shown."""
    screen = RunScreen(model.record, model=model)
    async with DdptuiApp(first_screen=screen).run_test(size=(200, 60)) as pilot:
        await pilot.pause(0.3)
        status = str(screen.query_one("#run-status", Static).render())
        errors = str(screen.query_one("#errors-text", Static).render())
    return status, errors


def _cli(model: RunModel) -> list[str]:
    view = RunView.of(model.record, model, model.judgement(model.record))
    return [line.plain.strip() for line in status_lines(view)]


def test_status_of_128_nodes_says_the_nodes_that_stand_alike_in_one_line() -> None:
    model = scenes.cluster_model()
    model.apply(HostSilent("gpu-007", 12.0, "connect timed out"))
    lines = _cli(model)
    nodes = [line for line in lines if line.startswith("node ") or " of 128 nodes " in line]
    assert nodes[0] == "127 of 128 nodes (0–6, 8–127): 8 rank(s) each, running"
    assert nodes[1].startswith("node 7 gpu-007: 8 rank(s), not answering (")
    assert len(nodes) == 2, nodes


def test_status_and_the_run_screen_say_the_same_of_a_recorded_failure() -> None:
    model = scenes.run_model()
    model.apply(HostSilent("gpu-b", 12.0, "connect timed out"))
    cli = _cli(model)
    status, errors = asyncio.run(_console(model))
    state, *_ = cli
    assert state == "run 20261130-222218-h200: failed, attempt 1"
    assert status.startswith(state)
    # Each classified error: the same lines, first failure first, in both.
    shown = [line.strip() for line in errors.splitlines()]
    told = [line for line in cli if line.startswith(("✗", "cause:", "fix:"))]
    assert told and [line for line in shown if line in told] == told
    assert told[0].startswith("✗ first failure: nccl_")
    # The silent host and what it means.
    node = next(line for line in cli if line.startswith("node 1 gpu-b"))
    note = node.split("not answering (", 1)[1].rstrip(")")
    assert f"gpu-b not answering: {note}" in status


def _in(state: RunState, detail: str) -> RunRecord:
    record = scenes.run_record(state)
    record.states[-1].detail = detail
    return record


@pytest.mark.parametrize(
    ("state", "detail"),
    [
        (RunState.STAGING, "uploading the code to 2 host(s)"),
        (RunState.RUNNING, "every node started"),
        (RunState.HUNG, "no step for 31 s at step 120; rank 3 on gpu-b: its process is stopped"),
        (RunState.STOPPING, "stop requested"),
        (RunState.COMPLETED, "every node exited 0"),
        (RunState.STOPPED, "stopped on request"),
        (RunState.FAILED, "torchrun on gpu-b (node 1) exited 1"),
    ],
)
def test_every_state_says_why_in_both(state: RunState, detail: str) -> None:
    model = RunModel(_in(state, detail))
    state_line = _cli(model)[0]
    assert state_line.startswith(f"run 20261130-222218-h200: {state.value}")
    assert state_line.endswith(f": {detail}")
    status, _ = asyncio.run(_console(model))
    assert status.startswith(state_line)


def test_what_the_supervisor_does_about_an_ended_run_is_said_until_it_is_done() -> None:
    model = RunModel(_in(RunState.FAILED, "gpu-b (node 1) stopped answering"))
    judgement = dataclasses.replace(
        model.judgement(model.record), doing="ending what is left of the run on gpu-a"
    )
    view = RunView.of(model.record, model, judgement)
    said = status_lines(view)[0].plain
    assert said.endswith(
        ": gpu-b (node 1) stopped answering — now ending what is left of the run on gpu-a"
    )
    assert view.document()["doing"] == "ending what is left of the run on gpu-a"
    done = RunView.of(model.record, model, model.judgement(model.record))
    assert done.document()["doing"] is None and "now" not in status_lines(done)[0].plain


def test_a_hang_judged_by_output_says_so_and_no_step() -> None:
    hang = Hang(since=1000.0, window_s=300.0, step=None, ranks=(), quiet=True)
    said = [line.plain for line in hang_lines(hang, 1301.0)]
    assert said[0].endswith("(301 s without output or CPU use, window 300 s)"), said
    assert hang.summary(1301.0).startswith("no output and no CPU use for 301 s;")
    stepping = dataclasses.replace(hang, step=12, quiet=False)
    assert hang_lines(stepping, 1301.0)[0].plain.endswith(
        "(301 s without a step, window 300 s), at step 12"
    )


def test_a_run_that_failed_while_staging_says_why_and_no_rank_is_said_to_start() -> None:
    record = scenes.run_record(RunState.STAGING)
    record.transition(RunState.FAILED, "staging failed: gpu-b: Session request failed")
    model = RunModel(record)
    cli = _cli(model)
    status, _ = asyncio.run(_console(model))
    assert cli[0] == (
        "run 20261130-222218-h200: failed: staging failed: gpu-b: Session request failed"
    )
    assert status.startswith(cli[0])
    assert not any("starting (" in line for line in [*cli, status])


def test_the_runs_list_has_one_clock_and_one_rule_for_how_long_a_run_took(tmp_path: Path) -> None:
    record = scenes.run_record(RunState.STAGING)
    record.transition(RunState.FAILED, "staging failed", now=scenes.CREATED + 65)
    # Long after: a run that failed while staging took 65 s, not "until now".
    row = run_row(record, scenes.CREATED + 86400)
    assert row.took.plain == "1m05s"
    from ddptui.run.store import RunStore

    store = RunStore(tmp_path / "runs")
    store.create(record, "")

    async def shown() -> list[str]:
        screen = RunsScreen(RunControl(store), now=scenes.CREATED + 86400)
        async with DdptuiApp(first_screen=screen).run_test(size=(160, 20)) as pilot:
            await pilot.pause(0.2)
            table = screen.query_one("#runs")
            return [str(cell) for cell in table.get_row_at(0)]  # type: ignore[attr-defined]

    assert asyncio.run(shown()) == [cell.plain for cell in row.cells()]


def test_the_runs_list_names_a_slurm_run_s_jobs_and_how_slurm_ended_the_last() -> None:
    record = RunRecord("20261130-120000-slrm", 0.0, "", "trainer", "gloo", "", 4, [], [])
    record.attempts = [
        Attempt(1, 1.0, 15041, scheduler=SchedulerJob("41", "COMPLETED")),
        Attempt(2, 2.0, 15043, scheduler=SchedulerJob("43", "CANCELLED")),
    ]
    assert run_row(record, 0.0).hosts.plain == "jobs 41, 43 (CANCELLED)"
    record.nodes = [
        NodeRecord(name, name, rank, 2, f"/w/node{rank}", [], {})
        for rank, name in enumerate(("gpu1", "gpu2"))
    ]
    record.attempts[-1].scheduler = SchedulerJob("43")
    assert run_row(record, 0.0).hosts.plain == "jobs 41, 43 on gpu1, gpu2"


def test_the_json_documents_give_a_scheduler_s_jobs_under_keys_of_no_scheduler_s_own() -> None:
    slurm = RunRecord("20261130-120000-slrm", 0.0, "", "trainer", "gloo", "", 4, [], [])
    slurm.attempts = [
        Attempt(1, 1.0, 15041, scheduler=SchedulerJob("41"), allocation="n[0-1]"),
        Attempt(2, 2.0, 15041, scheduler=SchedulerJob("41", "COMPLETED"), allocation="n[1-2]"),
        Attempt(3, 3.0, 15043, scheduler=SchedulerJob("43")),
        Attempt(4, 4.0, 15043, scheduler=SchedulerJob("43", in_allocation=True)),
    ]
    status = RunView(slurm, Judgement.of_record(slurm), (), (), "", ()).document()
    assert [(each["scheduler"], each["allocation"]) for each in status["attempts"]] == [
        ({"job": "41", "state": None, "in_allocation": False}, "n[0-1]"),
        ({"job": "41", "state": "COMPLETED", "in_allocation": False}, "n[1-2]"),
        ({"job": "43", "state": None, "in_allocation": False}, None),
        ({"job": "43", "state": None, "in_allocation": True}, None),
    ]
    assert run_document(slurm, 10.0)["scheduler_jobs"] == [
        {"job": "41", "state": "COMPLETED", "in_allocation": False, "attempts": [1, 2]},
        {"job": "43", "state": None, "in_allocation": True, "attempts": [3, 4]},
    ]
    ssh = RunRecord("20261130-120000-sshh", 0.0, "", "trainer", "gloo", "", 4, [], [])
    ssh.attempts = [Attempt(1, 1.0, 29500)]
    status = RunView(ssh, Judgement.of_record(ssh), (), (), "", ()).document()
    assert status["attempts"][0]["scheduler"] is None
    assert run_document(ssh, 10.0)["scheduler_jobs"] == []


def test_status_says_where_the_launch_time_went_slowest_host_first() -> None:
    model = scenes.run_model(failed=False)
    timeline = model.timeline()
    assert timeline is not None
    # What the supervisor records of the ranks' stages as their events arrive.
    model.record.timelines = [timeline]
    cli = _cli(model)
    heading = next(line for line in cli if line.startswith("launch of attempt 1"))
    # The recorded events say when the ranks were ready and stepped, 14.3 s and 14.7 s in; they
    # tell nothing of the stages between (written before the trainer told of them).
    assert heading == (
        "launch of attempt 1: first step in 14.7 s; slowest: gpu-b, 10.2 s torchrun starting "
        "the ranks … building the model and loading data"
    )
    hosts = [line for line in cli if line.startswith(("gpu-a", "gpu-b"))]
    assert hosts[0].startswith("gpu-b") and "= 14.7 s  ◀ slowest" in hosts[0]
    assert "0.4 ssh · 1.4 probe · 0.8 check · 1.1 stage · 0.4 torchrun · 10.2 setup" in hosts[0]
    # What NCCL said of gpu-b's communicator start follows its stages; gpu-a's said nothing.
    assert hosts[0].endswith("NCCL init 1.42 s on rank 3 (bootstrap 1.10, connections 0.30)")
    assert "NCCL" not in hosts[1]
    document = RunView.of(model.record, model, model.judgement(model.record)).document()
    assert document["launch"]["first_step_s"] == 14.691
    assert document["launch"]["slowest"] == "gpu-b"


def test_a_run_on_many_hosts_is_one_short_row_naming_two_and_counting_the_rest() -> None:
    record = RunRecord("20261130-120000-many", 0.0, "", "trainer", "gloo", "", 256, [], [])
    record.nodes = [
        NodeRecord(f"gpu{rank:03d}", "", rank, 2, f"/w/node{rank}", [], {}) for rank in range(128)
    ]
    assert run_row(record, 0.0).hosts.plain == "gpu000, gpu001 +126"
    record.nodes = record.nodes[:2]
    assert run_row(record, 0.0).hosts.plain == "gpu000, gpu001"


def test_the_runs_document_counts_a_run_s_incidents_restarts_and_hosts_set_aside() -> None:
    record = RunRecord("20261130-120000-heal", 0.0, "", "trainer", "gloo", "", 4, [], [])
    record.incidents = [
        Incident(1, 1, 10.0, "lost", ("gpu2",), "silent", resumed_attempt=2),
        Incident(2, 2, 20.0, "raised", (), "", action="not recovered: no host is to blame"),
    ]
    record.set_aside = [SetAside("gpu2", "silent", 10.0)]
    document = run_document(record, 30.0)
    assert (document["incidents"], document["restarts"], document["set_aside"]) == (2, 1, ["gpu2"])
    # The list says the restarts too: one incident resumed, one given up.
    assert run_row(record, 30.0).healed.plain == "1"


def test_the_runs_list_and_its_document_give_the_effective_training_time_ratio() -> None:
    record = RunRecord("20261130-120000-heal", 0.0, "", "trainer", "gloo", "", 4, [], [])
    record.attempts = [Attempt(1, 900.0, 29500), Attempt(2, 1450.0, 29500)]
    record.timelines = [Timeline(1, 900.0, {"gpu1": {"first_step": 1000.0}})]
    # Failed at step 140 (1400 s, 2 s a step), resumed from step 100 (1320 s), stepping again
    # at 1500 s: 180 s of the 1000 since the first step lost.
    record.incidents = [
        Incident(1, 1, 1410.0, "lost", ("gpu2",), "silent", resumed_attempt=2, last_step=140,
                 checkpoint_step=100, first_step_at=1500.0, last_step_at=1400.0, step_s=2.0)
    ]  # fmt: skip
    assert run_row(record, 2000.0).kept.plain == "0.82"
    assert run_document(record, 2000.0)["effective_training_time_ratio"] == pytest.approx(0.82)
    record.incidents[0].step_s = None
    assert run_row(record, 2000.0).kept.plain == "—"
    assert run_document(record, 2000.0)["effective_training_time_ratio"] is None
