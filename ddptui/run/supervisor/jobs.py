"""What changes a run: jobs the supervisor does one at a time, in the order they arrive.

A viewer's request becomes a job (:class:`Launch`, :class:`Resume`, :class:`Stop`); judging
queues :class:`Conclude`, :class:`DumpHang` and :class:`StopHang`; the backend's watch queues
:class:`NodesEnded` and :class:`Restarted`; a supervisor that finds a start cut short queues
:class:`Interrupted`; a part of the supervisor that crashed queues :class:`Crashed`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddptui.run.backends import NodesEnded, Restarted
from ddptui.run.following.state import Verdict
from ddptui.run.protocol import Request
from ddptui.run.record import RunRecord, RunState

if TYPE_CHECKING:
    from ddptui.run.supervisor.viewers import Viewer


@dataclass(frozen=True, eq=False)
class Asked:
    """Who asked for a job, to be answered when it is done."""

    viewer: Viewer
    request: str


@dataclass(eq=False)
class Launch:
    asked: Asked | None = None
    debug: bool = False


@dataclass(eq=False)
class Resume:
    asked: Asked | None = None
    debug: bool = False
    began: float | None = None
    """When the resume was asked for (the asking command's start): its timeline's start."""
    bring_back: tuple[str, ...] = ()
    """Hosts that recovery set aside, usable again from this resume on (as spares)."""


@dataclass(eq=False)
class Stop:
    asked: Asked | None = None
    kill: bool = False


@dataclass(eq=False)
class Conclude:
    verdict: Verdict


@dataclass(eq=False)
class DumpHang:
    pass


@dataclass(eq=False)
class StopHang:
    pass


@dataclass(eq=False)
class Interrupted:
    pass


@dataclass(eq=False)
class Crashed:
    error: BaseException


Job = (
    Launch
    | Resume
    | Stop
    | Conclude
    | DumpHang
    | StopHang
    | Interrupted
    | NodesEnded
    | Restarted
    | Crashed
)


def name(job: Job) -> str:
    """What a job is called where users read it ("queued behind the stop under way")."""
    match job:
        case Stop(kill=True):
            return "kill"
        case NodesEnded():
            return "job-ended"
        case _:
            return {
                Launch: "launch",
                Resume: "resume",
                Stop: "stop",
                Conclude: "conclude",
                DumpHang: "hang-dump",
                StopHang: "hang-stop",
                Interrupted: "interrupted",
                Restarted: "requeued",
                Crashed: "crashed",
            }[type(job)]


def asked_job(
    asked: Asked, request: Request, record: RunRecord, pending: Iterable[Job | None]
) -> Job | str:
    """The job a viewer's ``request`` (other than a snapshot or a dump) asks for, with
    ``pending`` jobs under way or queued; or why there is none: a resume asked now would be one
    too many, or the request is unknown."""
    match request.op:
        case "resume" if any(isinstance(job, (Launch, Resume)) for job in pending):
            attempt = len(record.attempts) + (0 if record.state is RunState.STARTING else 1)
            return f"run {record.id}: attempt {attempt} is starting already (asked before you)"
        case "resume":
            return Resume(
                asked, debug=request.debug, began=request.began, bring_back=request.bring_back
            )
        case "stop" | "kill":
            return Stop(asked, kill=request.op == "kill")
        case _:
            return f"unknown request {request.op!r}"
