"""Slurm's final word on the runs whose end no supervisor saw: a job that ended while nothing
followed it, asked of Slurm's accounting (``sacct``) when the runs are listed."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable

from ddptui.atomic import write_atomic
from ddptui.errors import UsageError
from ddptui.run.backends.slurm import commands
from ddptui.run.backends.slurm.job import ENDED
from ddptui.run.record import RunRecord
from ddptui.run.store import RunStore

SACCT_EVERY_S = 30.0
"""Slurm's accounting is asked no more often: a database query for the whole cluster's users."""
SACCT_FILE = "sacct.json"
"""In the run store: when Slurm's accounting was last asked, and what it said."""


def settle(
    store: RunStore, records: Iterable[RunRecord], supervised: Callable[[str], bool]
) -> bool:
    """Ask Slurm's accounting (``sacct``) how the last job of each ended Slurm run ended,
    where its supervisor did not see it end (``supervised``: whether one holds a run now), and
    keep the answer in the record; asked at most every :data:`SACCT_EVERY_S` by every command
    and screen together. Whether a record changed."""
    waiting = {
        jobs[-1].job.id: record.id
        for record in records
        if record.state.final and (jobs := record.scheduler_jobs) and not jobs[-1].job.state
    }
    waiting = {job: run for job, run in waiting.items() if not supervised(run)}
    if not waiting:
        return False
    asked = store.root / SACCT_FILE
    try:
        cached = json.loads(asked.read_text(encoding="utf-8"))
        fresh = time.time() - float(cached["time"]) < SACCT_EVERY_S
        states = {str(k): str(v) for k, v in cached["states"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        fresh, states = False, {}
    if not fresh:
        try:
            states = commands.accounted_states(sorted(waiting))
        except (commands.SlurmError, UsageError):
            states = {}
        write_atomic(asked, json.dumps({"time": time.time(), "states": states}))
    changed = False
    for job_id, run_id in waiting.items():
        state = states.get(job_id)
        if state is None or state not in ENDED:
            continue

        def settle(record: RunRecord, job_id: str = job_id, state: str = state) -> None:
            for attempt in record.attempts:
                if attempt.scheduler is not None and attempt.scheduler.id == job_id:
                    attempt.scheduler = attempt.scheduler.ended_as(state)

        store.update(run_id, settle)
        changed = True
    return changed
