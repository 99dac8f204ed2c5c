"""A run's effective training time ratio: wall time spent on steps that were kept ÷ wall time
since the run's first step, from its record alone (pure). ``runs`` and ``status`` (words and
``--json``) show it; a part not known makes it not known, never a guess."""

from __future__ import annotations

from ddptui.run.record import RunRecord


def first_step_at(record: RunRecord, since_attempt: int = 1) -> float | None:
    """When ``record``'s run first made a step in attempt ``since_attempt`` or a later one, as
    its launch timelines say (the head node's clock); None before, and for ranks that write no
    step events."""
    return min(
        (
            stamps["first_step"]
            for timeline in record.timelines
            if timeline.attempt >= since_attempt
            for stamps in timeline.hosts.values()
            if "first_step" in stamps
        ),
        default=None,
    )


def effective_training_time_ratio(record: RunRecord, now: float) -> float | None:
    """Wall time spent on steps that were kept ÷ wall time since the run's first step (to
    ``now`` while it goes on, to its end once it ended); None while a part is not known.

    What a resume after an incident loses runs from the wall time of its checkpoint's step to
    the resumed attempt's first step: the steps redone and the time down between. A failed
    attempt that made no step saved no checkpoint: the resume after it starts from the one
    before, whose loss runs on. A run that ended failed kept its last steps: nothing made them
    again. An incident before the first step costs nothing of this time.
    """
    first, end = first_step_at(record), record.ended_or(now)
    if first is None or end <= first:
        return None
    lost, counted_to, since = 0.0, first, None
    for incident in record.incidents:
        if incident.resumed_attempt is None or incident.detected_at < first:
            continue
        if since is None or incident.last_step_at is not None:
            since = incident.checkpoint_at
        if since is None:
            return None
        back = incident.first_step_at
        if back is None:
            back = first_step_at(record, incident.resumed_attempt)
        until = end if back is None else min(back, end)
        # Losses that overlap (a resume that failed before its first step) count once.
        lost += max(0.0, until - max(since, counted_to))
        counted_to = max(counted_to, until)
    return max(0.0, end - first - lost) / (end - first)
