"""The runs list's words: one row per run, as ``ddptui runs`` prints it and the console's runs
screen shows it: one clock (the head node's local time) and one rule for how long a run took.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from ddptui.present.status import STATE_STYLE, ratio_text
from ddptui.run.record import RunRecord
from ddptui.run.training_time import effective_training_time_ratio
from ddptui.run.view import scheduler_document
from ddptui.untrusted import plain

COLUMNS = ("run", "state", "started", "took", "try", "healed", "kept", "ranks", "hosts")
"""``try``: the attempt the run is on (1 until a resume or a requeue); ``healed``: how many of
its attempts recovery started by itself after a fault (``[recovery]``); ``kept``: its effective
training time ratio (:mod:`ddptui.run.training_time`)."""


@dataclass(frozen=True)
class RunRow:
    run: Text
    state: Text
    started: Text
    took: Text
    attempt: Text
    healed: Text
    kept: Text
    ranks: Text
    hosts: Text

    def cells(self) -> tuple[Text, ...]:
        return (
            self.run,
            self.state,
            self.started,
            self.took,
            self.attempt,
            self.healed,
            self.kept,
            self.ranks,
            self.hosts,
        )


def duration_s(record: RunRecord, now: float) -> float:
    """From its creation to its last change of state once it ended; until ``now`` while it
    goes on. A run that failed while staging took as long as that, not "until now"."""
    return max(record.ended_or(now) - record.created, 0.0)


def duration(seconds: float) -> str:
    """``4m07s``, ``2h05m``."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def started(record: RunRecord) -> str:
    """``12-01 00:22``: the list fits 80 columns up to its hosts; ``runs --json`` and
    ``status`` give the whole time."""
    return time.strftime("%m-%d %H:%M", time.localtime(record.created))


HOSTS_NAMED = 2
"""Hosts a row names before it counts the rest: a run on 128 hosts is one line, not a page."""


def _where(record: RunRecord) -> str:
    """The run's hosts (the first :data:`HOSTS_NAMED`, then how many more); a scheduler's jobs
    first, with how it says the last one ended."""
    names = [node.host for node in record.nodes]
    more = len(names) - HOSTS_NAMED
    hosts = ", ".join(names[:HOSTS_NAMED]) + (f" +{more}" if more > 0 else "")
    jobs = [entry.job for entry in record.scheduler_jobs]
    if not jobs:
        return hosts
    ended = f" ({jobs[-1].state})" if jobs[-1].state else ""
    named = f"job{'s' if len(jobs) > 1 else ''} {', '.join(job.id for job in jobs)}{ended}"
    return f"{named} on {hosts}" if hosts else named


def restarts(record: RunRecord) -> int:
    """The attempts recovery started by itself, each after an incident."""
    return sum(incident.resumed for incident in record.incidents)


def run_row(record: RunRecord, now: float) -> RunRow:
    demo = " (demo)" if record.demo else ""
    return RunRow(
        run=Text(record.id + demo),
        state=Text(record.state.value, STATE_STYLE.get(record.state, "bold")),
        started=Text(started(record)),
        took=Text(duration(duration_s(record, now))),
        attempt=Text(str(len(record.attempts))),
        healed=Text(str(restarts(record))),
        kept=Text(ratio_text(effective_training_time_ratio(record, now))),
        ranks=Text(str(record.world_size)),
        hosts=Text(plain(_where(record), one_line=True)),
    )


def run_document(record: RunRecord, now: float) -> dict[str, Any]:
    """One run as ``ddptui runs --json`` lists it (docs/cli.md)."""
    return {
        "id": record.id,
        "state": record.state.value,
        "detail": record.detail,
        "demo": record.demo,
        "created": record.created,
        "duration_s": round(duration_s(record, now), 1),
        "attempts": len(record.attempts),
        "world_size": record.world_size,
        "entry": record.entry,
        "hosts": [node.host for node in record.nodes],
        "incidents": len(record.incidents),
        "restarts": restarts(record),
        "effective_training_time_ratio": effective_training_time_ratio(record, now),
        "set_aside": [aside.host for aside in record.set_aside],
        "scheduler_jobs": [
            {**scheduler_document(entry.job), "attempts": list(entry.attempts)}
            for entry in record.scheduler_jobs
        ],
    }
