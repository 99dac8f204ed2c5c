"""The run store: records round-trip through TOML, ids resolve by prefix, updates are locked."""

from __future__ import annotations

import multiprocessing
import os
import re
import stat
from pathlib import Path

import pytest

from ddptui.run.incidents import MAX_INCIDENTS, MAX_WORDS
from ddptui.run.record import (
    TRANSITIONS,
    Attempt,
    IllegalTransition,
    Incident,
    NodeRecord,
    RunRecord,
    RunState,
    SchedulerJob,
    SetAside,
    StateChange,
)
from ddptui.run.store import RunNotFound, RunRecordUnreadable, RunStore, new_run_id, state_home
from ddptui.run.timeline import Timeline
from tests.helpers import OTHER, USER, as_user, attempts_to_replace, owned_dir, shared_tmp


def _record(run_id: str) -> RunRecord:
    record = RunRecord(
        id=run_id,
        created=1.5,
        hosts_file="/h.toml",
        entry="trainer",
        backend="gloo",
        master_addr="10.0.0.1",
        world_size=4,
        args=["--max-steps", "5"],
        nodes=[
            NodeRecord("a", "10.0.0.1", 0, 2, "/r/a", ["python", "-m", "x"], {"K": "v'\""}),
            NodeRecord("b", "10.0.0.2", 1, 2, "/r/b", ["python"], {}, {"torch": "2.13.0"}, -0.25),
        ],
        # A host name that TOML must quote as a key.
        timelines=[Timeline(1, 1.0, {"a": {"connected": 1.1}, "gpu-01.lab": {"probed": 1.5}})],
    )
    record.attempts.append(Attempt(1, 2.0, 29500))
    record.transition(RunState.STAGING, now=1.0)
    record.transition(RunState.STARTING, "attempt 1", now=1.5)
    record.transition(RunState.RUNNING, "attempt 1", now=2.0)
    return record


def test_a_record_round_trips_and_reports_its_state(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    record = _record("20261130-120000-abcd")
    store.create(record, "[cluster]\n")
    loaded = store.load(record.id)
    assert loaded == record
    assert loaded.state is RunState.RUNNING and not loaded.state.final
    assert store.hosts_file(record.id).read_text() == "[cluster]\n"


def test_a_slurm_run_s_jobs_round_trip_and_a_requeued_job_is_one_job_of_two_attempts(
    tmp_path: Path,
) -> None:
    store = RunStore(tmp_path)
    record = _record("20261130-120000-slrm")
    record.attempts = [
        Attempt(1, 2.0, 15041, scheduler=SchedulerJob("41", "COMPLETED"), allocation="node[0-1]"),
        Attempt(2, 3.0, 15042, scheduler=SchedulerJob("42"), allocation="node[0-1]"),
        Attempt(3, 4.0, 15042, scheduler=SchedulerJob("42"), allocation="node[1-2]"),
        # Recovery's attempt on a spare of the same allocation.
        Attempt(4, 5.0, 15042, scheduler=SchedulerJob("42", "COMPLETED", in_allocation=True)),
    ]
    store.create(record, "[cluster]\n")
    loaded = store.load(record.id)
    assert loaded == record and loaded.job_id == "42"
    assert [(each.job.id, each.attempts, each.job.state) for each in loaded.scheduler_jobs] == [
        ("41", (1,), "COMPLETED"),
        ("42", (2, 3, 4), "COMPLETED"),
    ]
    assert [attempt.scheduler.in_allocation for attempt in loaded.attempts[1:]] == [  # type: ignore[union-attr]
        False,
        False,
        True,
    ]
    assert _record("20261130-120000-sshx").scheduler_jobs == []


OLD_SLURM_RECORD = """\
version = 1
id = "20261130-120000-slrm"
created = 1.5
hosts_file = "/h.toml"
demo = false
entry = "trainer"
backend = "nccl"
master_addr = "10.0.0.1"
world_size = 2
args = []
state = "completed"
nodes = []
states = []
timelines = []

[[attempts]]
number = 1
started = 2.0
master_port = 15041
ended = 3.0
outcome = "stopped"
detail = "Slurm requeued job 41"
job_id = "41"
allocation = "node[0-1]"

[[attempts]]
number = 2
started = 4.0
master_port = 15041
job_id = "41"
allocation = "node1"
slurm_state = "COMPLETED"

[[attempts]]
number = 3
started = 5.0
master_port = 29500
"""
"""A record as the version before wrote it: the attempts' Slurm job as ``job_id`` and
``slurm_state``."""


def test_a_record_of_the_version_before_reads_its_jobs_and_is_written_back_in_the_new_form() -> (
    None
):
    record = RunRecord.from_toml(OLD_SLURM_RECORD)
    assert [attempt.scheduler for attempt in record.attempts] == [
        SchedulerJob("41"),
        SchedulerJob("41", "COMPLETED"),
        None,
    ]
    assert [attempt.allocation for attempt in record.attempts] == ["node[0-1]", "node1", ""]
    text = record.to_toml()
    assert "job_id" not in text and "slurm_state" not in text
    assert '[attempts.scheduler]\njob = "41"\nstate = "COMPLETED"\n' in text
    assert RunRecord.from_toml(text) == record


@pytest.mark.parametrize(
    "scheduler",
    [
        'scheduler = "41"',
        "scheduler = { job = 41 }",
        'scheduler = { job = "" }',
        'scheduler = { state = "COMPLETED" }',
        'scheduler = { job = "41", state = 0 }',
        f'scheduler = {{ job = "{"4" * 257}" }}',
        'job_id = ""',
        "job_id = 41",
        'job_id = "41"\nslurm_state = ["COMPLETED"]',
    ],
)
def test_a_scheduler_job_that_ddptui_did_not_write_makes_the_record_unreadable(
    scheduler: str,
) -> None:
    text = OLD_SLURM_RECORD.replace('job_id = "41"\nallocation = "node1"', scheduler)
    with pytest.raises(ValueError, match="not a run record"):
        RunRecord.from_toml(text)


# --- incidents and the hosts set aside --------------------------------------------------------


def _healed(record: RunRecord) -> RunRecord:
    """``record`` after gpu-b failed once and the run resumed on gpu-e, then failed again with no
    spare left (nothing known yet of the second beyond what was blamed)."""
    record.incidents = [
        Incident(
            number=1,
            attempt=1,
            detected_at=100.0,
            cause="rank 3 on gpu-b was killed by SIGKILL",
            blamed=("gpu-b",),
            why="its kernel killed rank 3 (\x1b[31mOOM\x1b[0m)",
            fault_at=99.5,
            action="resumed on gpu-e in place of gpu-b",
            resumed_attempt=2,
            last_step=140,
            checkpoint_step=100,
            first_step_at=130.0,
            notified="ok",
            last_step_at=99.0,
            step_s=0.25,
        ),
        Incident(2, 2, 200.0, "gpu-e stopped answering", ("gpu-e", "gpu-f"), "silent 12 s"),
    ]
    record.set_aside = [
        SetAside("gpu-b", "rank 3 killed by SIGKILL", 101.0),
        SetAside("gpu-e", "silent 12 s", 201.0, "/w/runs/r/node1", "it did not answer"),
    ]
    return record


def test_incidents_and_hosts_set_aside_round_trip(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    record = _healed(_record("20261130-120000-heal"))
    store.create(record, "[cluster]\n")
    loaded = store.load(record.id)
    assert loaded == record
    first, second = loaded.incidents
    assert (first.steps_redone, second.steps_redone) == (40, None)
    assert (first.checkpoint_at, second.checkpoint_at) == (89.0, None)
    assert (second.fault_at, second.action, second.resumed_attempt, second.notified) == (
        None,
        "",
        None,
        "",
    )
    assert loaded.incident(2) is second
    with pytest.raises(KeyError, match="no incident 3"):
        loaded.incident(3)


def test_steps_redone_are_never_negative() -> None:
    incident = Incident(1, 1, 1.0, "x", (), "", last_step=90, checkpoint_step=100)
    assert incident.steps_redone == 0


def test_restarts_within_count_only_the_incidents_the_run_resumed_after_in_the_window() -> None:
    record = _healed(_record("20261130-120000-heal"))
    record.incidents.append(Incident(3, 3, 300.0, "again", ("gpu-f",), "", resumed_attempt=4))
    assert record.restarts_within(3600.0, now=310.0) == 2
    assert record.restarts_within(100.0, now=310.0) == 1
    assert record.restarts_within(5.0, now=310.0) == 0


def test_a_record_keeps_its_newest_incidents_and_cuts_long_words_so_it_always_reads() -> None:
    record = _record("20261130-120000-heal")
    record.incidents = [
        Incident(number, 1, float(number), "x" * 5000, ("gpu-b",), "why")
        for number in range(1, MAX_INCIDENTS + 3)
    ]
    loaded = RunRecord.from_toml(record.to_toml())
    assert [each.number for each in loaded.incidents] == list(range(3, MAX_INCIDENTS + 3))
    assert len(loaded.incidents[0].cause) == MAX_WORDS and loaded.incidents[0].cause.endswith("…")


def test_a_record_from_before_incidents_reads_with_none() -> None:
    record = RunRecord.from_toml(OLD_SLURM_RECORD)
    assert (record.incidents, record.set_aside, record.restarts_within(1e9, 10.0)) == ([], [], 0)


INCIDENT = """
[[incidents]]
number = 1
attempt = 1
detected_at = 100.0
cause = "rank 3 on gpu-b was killed by SIGKILL"
blamed = ["gpu-b"]
why = "its kernel killed it"
"""


def test_a_written_incident_table_reads() -> None:
    (incident,) = RunRecord.from_toml(OLD_SLURM_RECORD + INCIDENT).incidents
    assert incident == Incident(
        1, 1, 100.0, "rank 3 on gpu-b was killed by SIGKILL", ("gpu-b",), "its kernel killed it"
    )
    # Written by the version before: no time of its last step nor pace, so no checkpoint's time.
    assert (incident.last_step_at, incident.step_s, incident.checkpoint_at) == (None, None, None)
    (timed,) = RunRecord.from_toml(
        OLD_SLURM_RECORD + INCIDENT + "last_step_at = 90\nstep_s = 3600\n"
    ).incidents
    assert (timed.last_step_at, timed.step_s) == (90.0, 3600.0)


def test_a_time_the_reader_would_refuse_is_written_as_not_known_and_a_pace_at_its_cap() -> None:
    record = _record("20261130-120000-heal")
    record.incidents = [
        Incident(1, 1, 10.0, "x", (), "", fault_at=float("nan"), last_step_at=float("inf")),
        Incident(2, 1, 20.0, "y", (), "", step_s=7200.0),
        Incident(3, 1, 30.0, "z", (), "", step_s=float("nan")),
    ]
    first, second, third = RunRecord.from_toml(record.to_toml()).incidents
    assert (first.fault_at, first.last_step_at) == (None, None)
    assert (second.step_s, third.step_s) == (3600.0, None)


def test_the_checkpoint_s_step_is_dated_back_from_the_last_step_at_the_attempt_s_pace() -> None:
    incident = Incident(1, 1, 500.0, "x", (), "", last_step=140, last_step_at=400.0, step_s=2.0)
    assert incident.checkpoint_at is None  # until the resume says its checkpoint's step
    incident.checkpoint_step = 100
    assert incident.checkpoint_at == 320.0
    incident.step_s = None
    assert incident.checkpoint_at is None
    # The checkpoint of the last step itself needs no pace.
    incident.checkpoint_step = 140
    assert incident.checkpoint_at == 400.0


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("number", "0"),
        ("number", '"1"'),
        ("attempt", "true"),
        ("detected_at", "nan"),
        ("detected_at", '"noon"'),
        ("cause", "3"),
        ("blamed", '"gpu-b"'),
        ("blamed", '[""]'),
        ("blamed", f'["{"g" * 257}"]'),
        ("why", f'"{"w" * (MAX_WORDS + 1)}"'),
        ("fault_at", "inf"),
        ("action", "[]"),
        ("resumed_attempt", "0"),
        ("last_step", "-1"),
        ("checkpoint_step", "1.5"),
        ("first_step_at", "true"),
        ("notified", "{}"),
        ("last_step_at", "-inf"),
        ("last_step_at", '"late"'),
        ("step_s", "-0.5"),
        ("step_s", "3600.5"),
        ("step_s", "nan"),
        ("step_s", "false"),
    ],
)
def test_an_incident_that_ddptui_did_not_write_makes_the_record_unreadable(
    key: str, value: str
) -> None:
    table = "\n".join(line for line in INCIDENT.splitlines() if not line.startswith(f"{key} ="))
    with pytest.raises(ValueError, match="not a run record: TypeError"):
        RunRecord.from_toml(f"{OLD_SLURM_RECORD}{table}\n{key} = {value}\n")


@pytest.mark.parametrize(
    "text",
    [
        'incidents = "none"',
        "incidents = [1]",
        'set_aside = ["gpu-b"]',
        'set_aside = [{ host = "gpu-b", why = "x" }]',
        'set_aside = [{ host = "", why = "x", at = 1.0 }]',
        'set_aside = [{ host = "gpu-b", why = 1, at = 1.0 }]',
        'set_aside = [{ host = "gpu-b", why = "x", at = -inf }]',
    ],
)
def test_incidents_or_hosts_set_aside_that_ddptui_did_not_write_make_the_record_unreadable(
    text: str,
) -> None:
    with pytest.raises(ValueError, match=r"not a run record: (TypeError|KeyError)"):
        RunRecord.from_toml(text + "\n" + OLD_SLURM_RECORD)


def test_ids_resolve_latest_or_by_unique_prefix(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    with pytest.raises(RunNotFound, match="no runs yet"):
        store.resolve(None)
    for run_id in ("20261130-120000-aaaa", "20261130-120500-bbbb", "20261201-090000-cccc"):
        store.create(_record(run_id), "")
    assert store.resolve(None).id == "20261201-090000-cccc"
    assert store.resolve("20261130-1205").id == "20261130-120500-bbbb"
    with pytest.raises(RunNotFound, match="2 runs matching"):
        store.resolve("20261130")
    (tmp_path / "not-a-run").mkdir()
    assert len(store.records()) == 3


def test_update_changes_what_is_on_disk(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.create(_record("20261130-120000-abcd"), "")
    store.update("20261130-120000-abcd", lambda r: r.transition(RunState.STOPPED, "asked"))
    assert store.load("20261130-120000-abcd").state is RunState.STOPPED


def _append_details(root: Path, run_id: str, mark: str, times: int) -> None:
    store = RunStore(root)
    for _ in range(times):

        def change(record: RunRecord) -> None:
            record.attempt.detail += mark

        store.update(run_id, change)


def test_updates_from_several_processes_at_once_lose_nothing(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.create(_record("20261130-120000-abcd"), "")
    context = multiprocessing.get_context("spawn")
    writers = [
        context.Process(target=_append_details, args=(tmp_path, "20261130-120000-abcd", mark, 40))
        for mark in "abc"
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
    detail = store.load("20261130-120000-abcd").attempt.detail
    assert sorted(detail) == sorted("a" * 40 + "b" * 40 + "c" * 40)


@pytest.mark.parametrize(
    "content",
    [b"version = 1\nid = 3\n", b'version = 1\nid = "x', b"\xff\xfe", b"", b"version = 7\n"],
    ids=["wrong types", "half-written", "not text", "empty", "another version"],
)
def test_an_unreadable_record_is_named_and_never_overwritten(
    tmp_path: Path, content: bytes
) -> None:
    store = RunStore(tmp_path)
    store.create(_record("20261130-110000-good"), "")
    path = tmp_path / "20261130-120000-abcd" / "run.toml"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(RunRecordUnreadable, match=re.escape(str(path))):
        store.load("20261130-120000-abcd")
    with pytest.raises(RunRecordUnreadable):
        store.update("20261130-120000-abcd", lambda r: r.transition(RunState.STOPPED))
    assert path.read_bytes() == content
    catalogue = store.catalogue()
    assert [record.id for record in catalogue.records] == ["20261130-110000-good"]
    assert list(catalogue.unreadable) == ["20261130-120000-abcd"]
    assert str(path) in catalogue.unreadable["20261130-120000-abcd"]


def _walk(*states: RunState) -> RunRecord:
    record = _record("20261130-120000-abcd")
    record.states.clear()
    for state in states:
        record.transition(state)
    return record


def test_every_state_is_reachable_and_every_final_state_can_be_resumed() -> None:
    reachable: set[RunState | None] = {None}
    frontier: list[RunState | None] = [None]
    while frontier:
        for following in TRANSITIONS[frontier.pop()]:
            if following not in reachable:
                reachable.add(following)
                frontier.append(following)
    assert reachable == {None, *RunState}
    for state in RunState:
        if state.final:
            assert TRANSITIONS[state] == {RunState.STARTING}, state


def test_a_run_goes_the_ways_the_supervisor_takes_it() -> None:
    S = RunState
    _walk(S.STAGING, S.FAILED, S.STARTING, S.RUNNING, S.HUNG, S.RUNNING, S.COMPLETED)
    _walk(S.STAGING, S.STARTING, S.RUNNING, S.STOPPING, S.STOPPED, S.STARTING, S.FAILED)
    _walk(S.STAGING, S.STARTING, S.RUNNING, S.HUNG, S.STOPPING, S.FAILED)


def test_an_attempt_begins_runs_where_placed_and_ends_once_with_its_notes() -> None:
    record = _record("20261203-120000-abcd")
    record.end_attempt(RunState.STOPPED, "stopped on request", now=3.0)
    placed = [NodeRecord("n7", "10.0.0.7", 0, 4, "/r/n7", ["python"], {})]
    record.begin_attempt(Attempt(2, 4.0, 29501, scheduler=SchedulerJob("42")), "attempt 2")
    record.runs("every node started", 5.0, placed, "n7")
    assert (record.nodes, record.master_addr, record.attempt.allocation) == (
        placed,
        "10.0.0.7",
        "n7",
    )
    record.end_attempt(RunState.FAILED, "n7 stopped answering", now=6.0)
    record.add_to_detail(["SIGKILL to python on n7"])
    first, second = record.attempts
    assert (first.ended, first.outcome, first.detail) == (3.0, "stopped", "stopped on request")
    assert (second.started, second.ended, second.outcome, record.job_id) == (
        4.0,
        6.0,
        "failed",
        "42",
    )
    assert second.detail == "n7 stopped answering; SIGKILL to python on n7"
    assert [(change.state, change.time) for change in record.states[-4:]] == [
        (RunState.STOPPED, 3.0),
        (RunState.STARTING, 4.0),
        (RunState.RUNNING, 5.0),
        (RunState.FAILED, 6.0),
    ]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (None, RunState.RUNNING),
        (RunState.STAGING, RunState.RUNNING),
        (RunState.RUNNING, RunState.STARTING),
        (RunState.STOPPING, RunState.RUNNING),
        (RunState.COMPLETED, RunState.FAILED),
        (RunState.FAILED, RunState.STOPPED),
        (RunState.STOPPED, RunState.RUNNING),
    ],
)
def test_any_other_change_is_a_bug_and_changes_nothing(
    before: RunState | None, after: RunState
) -> None:
    record = _record("20261130-120000-abcd")
    record.states.clear()
    if before is not None:
        record.states.append(StateChange(before, 1.0))
    kept = list(record.states)
    with pytest.raises(IllegalTransition):
        record.transition(after)
    assert record.states == kept


def test_state_home_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert state_home() == tmp_path / "ddptui" / "runs"
    assert len({new_run_id(0.0) for _ in range(20)}) > 1


# --- modes: the store is the user's alone, whatever the umask --------------------------------


def test_the_store_and_the_directories_it_makes_above_it_are_private_whatever_the_umask(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    store = RunStore(home / ".local" / "state" / "ddptui" / "runs")
    record = _record("20261130-120000-abcd")
    old = os.umask(0o002)
    try:
        store.create(record, "[cluster]\n")
        store.update(record.id, lambda kept: None)
    finally:
        os.umask(old)
    made = [store.root.parents[2], store.root.parents[1], store.root.parent, store.root]
    assert [_mode(path) for path in [*made, store.directory(record.id)]] == [0o700] * 5
    files = store.files(record.id)
    assert {_mode(path) for path in (files.record, files.hosts, files.lock)} == {0o600}
    assert _mode(home) == 0o755, "the home was not ddptui's to change"


def test_another_member_of_the_group_cannot_move_a_run_out_of_the_store() -> None:
    with shared_tmp() as shared:
        home = owned_dir(shared / "home")
        store = RunStore(home / ".local" / "state" / "ddptui" / "runs")
        record = _record("20261130-120000-abcd")
        as_user(USER, lambda: store.create(record, "[cluster]\n"))
        files = store.files(record.id)
        # Moving the run away, or the store, would let them put their own record and hosts.toml
        # under the same id for the user's ddptui to load.
        tried = [files.record, files.hosts, store.root / "placeholder", store.root.parent / "x"]
        assert as_user(OTHER, lambda: attempts_to_replace(tried)) == []
        assert store.load(record.id) == record


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)
