"""A run's record: its plan, attempts and state changes, and its TOML form (``run.toml``).

The states follow :data:`TRANSITIONS`; :mod:`ddptui.run.store` keeps the records on disk.
"""

from __future__ import annotations

import enum
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import tomli_w

from ddptui.layout import HostFiles
from ddptui.probe.facts import NA, HostFacts

# Incident and SetAside are the record's values: importers take them from here.
from ddptui.run.incidents import MAX_HOSTS, MAX_INCIDENTS, incidents_of, set_aside_of
from ddptui.run.incidents import Incident as Incident
from ddptui.run.incidents import SetAside as SetAside
from ddptui.run.timeline import Timeline

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

RECORD_VERSION = 1
MAX_SCHEDULER_TEXT = 256
"""A scheduler's job id or state, at most: Slurm's are a few dozen characters; a record saying
more was not written by ddptui."""


class RunState(str, enum.Enum):
    """Where a run stands; :data:`TRANSITIONS` says which state may follow which.

    - ``staging``: the record exists; the code is being uploaded to every host.
    - ``starting``: an attempt's torchrun is being started on every host.
    - ``running``: every node started; the supervisor follows and judges it.
    - ``hung``: running, but no answering host's ranks have stepped for the hang window;
      ``running`` again when they step.
    - ``stopping``: a stop was asked for (or a hang is being stopped); the nodes are going.
    - ``completed``, ``stopped``, ``failed``: the attempt ended so; final until a resume starts
      a new attempt (``starting``).
    """

    STAGING = "staging"
    STARTING = "starting"
    RUNNING = "running"
    HUNG = "hung"
    STOPPING = "stopping"
    COMPLETED = "completed"
    STOPPED = "stopped"
    FAILED = "failed"

    @property
    def final(self) -> bool:
        return self in (RunState.COMPLETED, RunState.STOPPED, RunState.FAILED)


TRANSITIONS: Mapping[RunState | None, frozenset[RunState]] = {
    None: frozenset({RunState.STAGING}),
    RunState.STAGING: frozenset({RunState.STARTING, RunState.FAILED}),
    RunState.STARTING: frozenset({RunState.RUNNING, RunState.FAILED}),
    RunState.RUNNING: frozenset(
        {
            RunState.HUNG,
            RunState.STOPPING,
            RunState.COMPLETED,
            # The ranks stopped on request without ddptui (someone touched control/stop).
            RunState.STOPPED,
            RunState.FAILED,
        }
    ),
    RunState.HUNG: frozenset(
        {
            RunState.RUNNING,
            RunState.STOPPING,
            RunState.COMPLETED,
            RunState.STOPPED,
            RunState.FAILED,
        }
    ),
    # A hung run stopped by on_hang = "stop" ends failed.
    RunState.STOPPING: frozenset({RunState.STOPPED, RunState.FAILED}),
    RunState.COMPLETED: frozenset({RunState.STARTING}),
    RunState.STOPPED: frozenset({RunState.STARTING}),
    RunState.FAILED: frozenset({RunState.STARTING}),
}
"""Which state may follow which (``None``: a new record). Anything else is a bug."""


class IllegalTransition(RuntimeError):
    """A state change :data:`TRANSITIONS` does not allow: a bug in ddptui, never user input."""


@dataclass
class NodeRecord:
    host: str
    address: str
    node_rank: int
    nproc: int
    run_dir: str
    argv: list[str]
    env: dict[str, str]
    versions: dict[str, str] = field(default_factory=dict)
    clock_offset_s: float | None = None
    """The host's clock minus the head node's, as the check measured it."""


def node_versions(facts: HostFacts | None) -> dict[str, str]:
    """What the check learnt of a host's stack, for its node's record
    (:attr:`NodeRecord.versions`)."""
    if facts is None:
        return {}
    found = {
        "python": facts.python.version,
        "torch": facts.torch.version,
        "cuda": facts.torch.cuda_build,
        "nccl": facts.torch.nccl_version,
        "driver": facts.gpus.driver_version,
    }
    return {key: str(value) for key, value in found.items() if value not in (None, NA)}


@dataclass(frozen=True)
class SchedulerJob:
    """The job a scheduler ran an attempt as; a requeued job's next start is the next attempt
    with the same id."""

    id: str
    state: str = ""
    """How the scheduler says the job ended (Slurm's ``COMPLETED``, ``NODE_FAIL``…); "" until
    known."""
    in_allocation: bool = False
    """Recovery started the attempt in the job's allocation, on the nodes it named: the
    scheduler did not start the job again."""

    def ended_as(self, state: str) -> SchedulerJob:
        """The same job, as the scheduler says it ended."""
        return replace(self, state=state)


@dataclass
class Attempt:
    number: int
    started: float
    master_port: int
    ended: float | None = None
    outcome: str = ""
    detail: str = ""
    scheduler: SchedulerJob | None = None
    """The scheduler's job, where a scheduler runs the attempt; None on SSH hosts."""
    allocation: str = ""
    """The nodes a scheduler ran the attempt on, as it lists them (``node[0-2]``)."""


@dataclass(frozen=True)
class JobAttempts:
    """One scheduler job of a run and the attempts it ran (a requeued job runs several)."""

    job: SchedulerJob
    """The job as its latest attempt knows it: how the scheduler says that one ended."""
    attempts: tuple[int, ...]


@dataclass
class StateChange:
    state: RunState
    time: float
    detail: str = ""


@dataclass
class RunRecord:
    """Everything about one run the head node keeps: plan, attempts, state changes."""

    id: str
    created: float
    hosts_file: str
    entry: str
    backend: str
    master_addr: str
    world_size: int
    args: list[str]
    nodes: list[NodeRecord]
    attempts: list[Attempt] = field(default_factory=list)
    states: list[StateChange] = field(default_factory=list)
    demo: bool = False
    loss_pattern: str | None = None
    """``[job] loss_pattern``: how the ranks' output says their loss."""
    timelines: list[Timeline] = field(default_factory=list)
    """Each attempt's launch timeline, once it began (a resume's has no check or staging)."""
    incidents: list[Incident] = field(default_factory=list)
    set_aside: list[SetAside] = field(default_factory=list)
    """Hosts this run will not use again until the user brings one back."""

    @property
    def state(self) -> RunState:
        return self.states[-1].state if self.states else RunState.STAGING

    @property
    def attempt(self) -> Attempt:
        return self.attempts[-1]

    def transition(self, state: RunState, detail: str = "", now: float | None = None) -> None:
        """Move to ``state``; :class:`IllegalTransition` unless :data:`TRANSITIONS` allows it."""
        current = self.states[-1].state if self.states else None
        if state not in TRANSITIONS[current]:
            was = current.value if current is not None else "new"
            raise IllegalTransition(f"run {self.id}: {was} → {state.value} is not allowed")
        self.states.append(StateChange(state, time.time() if now is None else now, detail))

    def begin_attempt(self, attempt: Attempt, detail: str) -> None:
        self.attempts.append(attempt)
        self.transition(RunState.STARTING, detail, now=attempt.started)

    def runs(
        self, detail: str, now: float, placed: list[NodeRecord] | None, allocation: str
    ) -> None:
        """The latest attempt runs, on ``placed`` (the nodes a scheduler gave it) if given."""
        if placed is not None:
            self.nodes, self.master_addr = placed, placed[0].address
            self.attempt.allocation = allocation
        self.transition(RunState.RUNNING, detail, now=now)

    def end_attempt(self, state: RunState, detail: str, now: float) -> None:
        """The latest attempt ended as ``state`` (once: a later call only moves the run)."""
        if self.attempts and self.attempt.ended is None:
            self.attempt.ended, self.attempt.outcome = now, state.value
            self.attempt.detail = detail
        self.transition(state, detail, now=now)

    def timeline(self, attempt: int | None = None) -> Timeline | None:
        """The launch timeline of ``attempt`` (default: the latest attempt, or the first
        while none started yet)."""
        wanted = attempt if attempt is not None else (self.attempt.number if self.attempts else 1)
        return next((line for line in self.timelines if line.attempt == wanted), None)

    def add_to_detail(self, lines: Sequence[str]) -> None:
        """``lines`` after the latest attempt's detail (what ``status`` shows of it)."""
        self.attempt.detail = "; ".join([self.attempt.detail, *lines]).strip("; ")

    @property
    def detail(self) -> str:
        """Why the run is in its state (the latest change's detail)."""
        return self.states[-1].detail if self.states else ""

    @property
    def job_id(self) -> str | None:
        """The scheduler's job of the latest attempt; None for a run on SSH hosts (or one not
        submitted yet)."""
        scheduler = self.attempts[-1].scheduler if self.attempts else None
        return None if scheduler is None else scheduler.id

    @property
    def scheduler_jobs(self) -> list[JobAttempts]:
        """The run's scheduler jobs in order, each with its attempts; empty on SSH hosts."""
        numbers: dict[str, list[int]] = {}
        latest: dict[str, SchedulerJob] = {}
        for attempt in self.attempts:
            if (job := attempt.scheduler) is not None:
                numbers.setdefault(job.id, []).append(attempt.number)
                latest[job.id] = job
        return [JobAttempts(latest[job], tuple(attempts)) for job, attempts in numbers.items()]

    def incident(self, number: int) -> Incident:
        """The incident numbered ``number``; :class:`KeyError` when the record no longer keeps
        it (past :data:`~ddptui.run.incidents.MAX_INCIDENTS`, the oldest are dropped)."""
        found = next((each for each in self.incidents if each.number == number), None)
        if found is None:
            raise KeyError(f"run {self.id} keeps no incident {number}")
        return found

    def ended_or(self, now: float) -> float:
        """When the run ended (its last change of state) once it did; ``now`` while it goes
        on."""
        return self.states[-1].time if self.state.final and self.states else now

    def restarts_within(self, window_s: float, now: float) -> int:
        """Incidents the run resumed after, detected in the ``window_s`` seconds up to ``now``."""
        return sum(
            1
            for incident in self.incidents
            if incident.resumed and incident.detected_at >= now - window_s
        )

    def spares_left(self, spares: Iterable[str]) -> list[str]:
        """Those of ``spares`` (names, in order) this run neither runs on nor set aside."""
        used = {node.host for node in self.nodes} | {aside.host for aside in self.set_aside}
        return [spare for spare in spares if spare not in used]

    @property
    def head(self) -> NodeRecord:
        return self.nodes[0]

    def ranks_of(self, node: NodeRecord) -> range:
        """``node``'s global ranks: every node's processes numbered in node-rank order."""
        base = sum(other.nproc for other in self.nodes if other.node_rank < node.node_rank)
        return range(base, base + node.nproc)

    def host_files(self, node: NodeRecord) -> HostFiles:
        """The files of ``node``'s part of the run, through the attempt starting next."""
        return HostFiles(self.ranks_of(node), len(self.attempts) + 1)

    def to_toml(self) -> str:
        document: dict[str, Any] = {
            "version": RECORD_VERSION,
            "id": self.id,
            "created": self.created,
            "hosts_file": self.hosts_file,
            "demo": self.demo,
            "entry": self.entry,
            "backend": self.backend,
            "master_addr": self.master_addr,
            "world_size": self.world_size,
            "args": list(self.args),
            "state": self.state.value,
            "nodes": [
                {
                    "host": node.host,
                    "address": node.address,
                    "node_rank": node.node_rank,
                    "nproc": node.nproc,
                    "run_dir": node.run_dir,
                    "argv": list(node.argv),
                    "env": dict(node.env),
                    "versions": dict(node.versions),
                    **(
                        {"clock_offset_s": node.clock_offset_s}
                        if node.clock_offset_s is not None
                        else {}
                    ),
                }
                for node in self.nodes
            ],
            "attempts": [
                {
                    key: value
                    for key, value in (
                        ("number", attempt.number),
                        ("started", attempt.started),
                        ("master_port", attempt.master_port),
                        ("ended", attempt.ended),
                        ("outcome", attempt.outcome),
                        ("detail", attempt.detail),
                        ("scheduler", _scheduler_table(attempt.scheduler)),
                        ("allocation", attempt.allocation or None),
                    )
                    if value is not None
                }
                for attempt in self.attempts
            ],
            "states": [
                {"state": change.state.value, "time": change.time, "detail": change.detail}
                for change in self.states
            ],
            "timelines": [timeline.to_document() for timeline in self.timelines],
            "incidents": [incident.to_document() for incident in self.incidents[-MAX_INCIDENTS:]],
            "set_aside": [host.to_document() for host in self.set_aside[-MAX_HOSTS:]],
        }
        if self.loss_pattern is not None:
            document["loss_pattern"] = self.loss_pattern
        return tomli_w.dumps(document)

    @classmethod
    def from_toml(cls, text: str) -> RunRecord:
        """Parse a record; :class:`ValueError` (with what is wrong) for anything else."""
        try:
            data = tomllib.loads(text)
            if data.get("version") != RECORD_VERSION:
                raise ValueError(f"record version {data.get('version')!r} is not {RECORD_VERSION}")
            return cls(
                id=_str(data, "id"),
                created=_float(data, "created"),
                hosts_file=_str(data, "hosts_file"),
                entry=_str(data, "entry"),
                backend=_str(data, "backend"),
                master_addr=_str(data, "master_addr"),
                world_size=int(data["world_size"]),
                args=[str(arg) for arg in data.get("args", [])],
                demo=bool(data.get("demo", False)),
                loss_pattern=_optional_str(data, "loss_pattern"),
                nodes=[
                    NodeRecord(
                        host=_str(node, "host"),
                        address=_str(node, "address"),
                        node_rank=int(node["node_rank"]),
                        nproc=int(node["nproc"]),
                        run_dir=_str(node, "run_dir"),
                        argv=[str(arg) for arg in node["argv"]],
                        env={str(k): str(v) for k, v in node.get("env", {}).items()},
                        versions={str(k): str(v) for k, v in node.get("versions", {}).items()},
                        clock_offset_s=(
                            _float(node, "clock_offset_s") if "clock_offset_s" in node else None
                        ),
                    )
                    for node in data["nodes"]
                ],
                attempts=[
                    Attempt(
                        number=int(attempt["number"]),
                        started=_float(attempt, "started"),
                        master_port=int(attempt["master_port"]),
                        ended=float(attempt["ended"]) if "ended" in attempt else None,
                        outcome=str(attempt.get("outcome", "")),
                        detail=str(attempt.get("detail", "")),
                        scheduler=_scheduler_job(attempt),
                        allocation=str(attempt.get("allocation", "")),
                    )
                    for attempt in data.get("attempts", [])
                ],
                states=[
                    StateChange(
                        RunState(change["state"]),
                        _float(change, "time"),
                        str(change.get("detail", "")),
                    )
                    for change in data.get("states", [])
                ],
                timelines=[Timeline.from_document(line) for line in data.get("timelines", [])],
                incidents=incidents_of(data.get("incidents", [])),
                set_aside=set_aside_of(data.get("set_aside", [])),
            )
        except (tomllib.TOMLDecodeError, KeyError, TypeError) as error:
            raise ValueError(f"not a run record: {error!r}") from None


def _str(data: Mapping[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} is not a string")
    return value


def _optional_str(data: Mapping[str, Any], key: str) -> str | None:
    return None if data.get(key) is None else _str(data, key)


def _scheduler_table(job: SchedulerJob | None) -> dict[str, str | bool] | None:
    if job is None:
        return None
    table: dict[str, str | bool] = {"job": job.id}
    if job.state:
        table["state"] = job.state
    if job.in_allocation:
        table["in_allocation"] = True
    return table


def _scheduler_job(attempt: Mapping[str, Any]) -> SchedulerJob | None:
    """An attempt's ``scheduler`` table; a record of the version before said ``job_id`` and
    ``slurm_state`` instead, and still reads."""
    if "scheduler" in attempt:
        table = attempt["scheduler"]
        if not isinstance(table, Mapping):
            raise TypeError("scheduler is not a table")
        job, state = _bounded(table, "job"), _bounded(table, "state", "")
        in_allocation = table.get("in_allocation", False)
        if not isinstance(in_allocation, bool):
            raise TypeError("a scheduler's in_allocation is not true or false")
    elif "job_id" in attempt:
        job, state = _bounded(attempt, "job_id"), _bounded(attempt, "slurm_state", "")
        in_allocation = False
    else:
        return None
    if not job:
        raise TypeError("a scheduler's job id is empty")
    return SchedulerJob(job, state, in_allocation)


def _bounded(data: Mapping[str, Any], key: str, default: str | None = None) -> str:
    """``data[key]``, a string of at most :data:`MAX_SCHEDULER_TEXT` characters (``default``
    where it is absent, if given)."""
    value = data.get(key, default)
    if not isinstance(value, str):
        raise TypeError(f"{key} is not a string")
    if len(value) > MAX_SCHEDULER_TEXT:
        raise TypeError(f"{key} is over {MAX_SCHEDULER_TEXT} characters")
    return value


def _float(data: Mapping[str, Any], key: str) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{key} is not a number")
    return float(value)
