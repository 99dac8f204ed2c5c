"""What ended while nobody watched: settled below the backends when the runs are listed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.run import backends
from ddptui.run.record import Attempt, RunState, SchedulerJob
from ddptui.run.store import RunStore
from tests.run.bed import two_host_record


def _ended_run(store: RunStore, run_id: str, job_id: str | None) -> None:
    record = two_host_record()
    record.id = run_id
    scheduler = None if job_id is None else SchedulerJob(job_id)
    record.attempts = [Attempt(1, 0.0, 29500, scheduler=scheduler)]
    for state in (RunState.STAGING, RunState.STARTING, RunState.FAILED):
        record.transition(state, state.value, now=0.0)
    store.create(record, "")


def test_a_slurm_run_s_unseen_end_is_asked_of_sacct_and_an_ssh_run_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slurm's accounting as a stand-in on PATH: it says how job 41 ended, and who asked.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    asked = tmp_path / "asked"
    sacct = bin_dir / "sacct"
    sacct.write_text(f'#!/bin/sh\necho "$@" >> {asked}\necho "41|CANCELLED by 0"\n')
    sacct.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    store = RunStore(tmp_path / "runs")
    _ended_run(store, "20261130-120000-slrm", "41")
    _ended_run(store, "20261130-120000-sshh", None)
    records = store.records()

    assert backends.settle(store, records, lambda run: False)
    assert store.load("20261130-120000-slrm").attempt.scheduler == SchedulerJob("41", "CANCELLED")
    assert store.load("20261130-120000-sshh").attempt.scheduler is None
    assert asked.read_text().split()[asked.read_text().split().index("-j") + 1] == "41"
