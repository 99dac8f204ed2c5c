"""Judging a followed attempt: what the supervisor should do next, from the run's model
(:class:`~ddptui.run.state.RunWatch`) and its record; pure, so every outcome is a unit test.

The model says what it sees (a verdict, a hang); judging turns that into one decision, in
this order: an attempt that ended is concluded before anything else; a hang is named (and
its stacks taken) once, as the record goes from running to hung; a hung run that steps again
is running again; ``on_hang = "stop"`` stops a hung run once."""

from __future__ import annotations

from dataclasses import dataclass

from ddptui.config.model import JobConfig
from ddptui.run.state import Hang, RunWatch, Verdict
from ddptui.run.store import RunState


@dataclass(frozen=True)
class Conclude:
    """The attempt ended: record how."""

    verdict: Verdict


@dataclass(frozen=True)
class Hung:
    """The ranks stopped stepping: record the hang (``newly``: it was running until now) and,
    with ``stop``, stop the run."""

    hang: Hang
    newly: bool
    stop: bool


@dataclass(frozen=True)
class SteppingAgain:
    """A hung run steps again."""


@dataclass(frozen=True)
class GoesOn:
    """Nothing to do."""


Decision = Conclude | Hung | SteppingAgain | GoesOn


def judge(watch: RunWatch, state: RunState, job: JobConfig) -> Decision:
    """What to do about the attempt the supervisor follows (its record in ``state``)."""
    verdict = watch.verdict()
    if verdict is not None:
        return Conclude(verdict)
    hang = watch.hang(job.hang_timeout_s)
    if hang is not None:
        return Hung(hang, newly=state is RunState.RUNNING, stop=job.on_hang == "stop")
    if state is RunState.HUNG:
        return SteppingAgain()
    return GoesOn()
