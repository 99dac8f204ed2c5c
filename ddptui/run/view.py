"""A run as a front end shows it: the record, the supervisor's judgement, nodes, ranks, errors.

:class:`RunView` is what ``ddptui status`` prints (as words through :mod:`ddptui.present`, or
as its ``--json`` document) and what the supervisor answers a ``snapshot`` request with. Built
from a :class:`~ddptui.run.following.model.RunModel` where one runs (the supervisor's, or one fed
from the hosts directly for a finished run), and read back from its document on the other side.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ddptui.run.diagnose import Category, Diagnosis
from ddptui.run.following.model import RunModel
from ddptui.run.following.sample import sample_of
from ddptui.run.following.state import Judgement, RankLog, Straggler
from ddptui.run.protocol import judgement_document, judgement_of, sample_document
from ddptui.run.record import RunRecord, SchedulerJob
from ddptui.run.training_time import effective_training_time_ratio


@dataclass(frozen=True)
class NodeView:
    host: str
    node_rank: int
    nproc: int
    run_dir: str
    alive: bool | None
    exit: int | None
    note: str | None
    """Why the host does not answer and what that means for the run, while it does not."""
    sample: Mapping[str, Any] = field(default_factory=dict)
    xids: tuple[str, ...] = ()
    """The Xid lines its kernel logged during the attempt, in words (``node1 GPU 0 (PCI …)
    logged Xid 79, the GPU fell off the bus, at 14:02:11``)."""


@dataclass(frozen=True)
class RankView:
    rank: int
    host: str
    node_rank: int
    local_rank: int
    state: str
    step: int | None
    loss: float | None
    samples_per_s: float | None
    step_time_s: float | None
    cuda_peak_mib: float | None
    rss_mib: float | None
    straggler: bool
    hung: str | None = None
    """Its part in the hang the supervisor judged, if the run hangs: ``stuck`` (something sets
    it apart: the hang's ``why`` says what) or ``waiting`` (it waits like its peers)."""
    compute_s: float | None = None
    """Its own work per step (its forward pass), where it says."""
    slower_by: float | None = None
    """Its work per step over the running ranks' median, less 1 (0.45: 45% slower)."""
    slow_since: float | None = None
    """Since when (its clock) it has been over the straggler threshold."""
    slow_cause: str | None = None
    """What its host says slows it (its GPU throttled, and since when), where it says."""
    last_line: str | None = None
    """The rank's latest line of output (raw: sanitise to show)."""
    last_line_at: float | None = None
    """When it arrived (wall clock)."""
    start_step: int | None = None
    resumed_from: str | None = None
    """The checkpoint the rank's attempt resumed from (raw: sanitise to show)."""


@dataclass(frozen=True)
class RunView:
    record: RunRecord
    judgement: Judgement
    nodes: tuple[NodeView, ...]
    ranks: tuple[RankView, ...]
    progress: str
    diagnoses: tuple[Diagnosis, ...]

    @classmethod
    def of(cls, record: RunRecord, model: RunModel, judgement: Judgement) -> RunView:
        named = {straggler.rank: straggler for straggler in judgement.stragglers}
        return cls(
            record=record,
            judgement=judgement,
            nodes=tuple(
                NodeView(
                    host=node.host,
                    node_rank=node.node_rank,
                    nproc=node.nproc,
                    run_dir=node.run_dir,
                    alive=model.nodes[node.host].alive,
                    exit=model.nodes[node.host].exit,
                    note=judgement.notes.get(node.host),
                    sample=dict(model.nodes[node.host].sample),
                    xids=tuple(seen.words(node.host) for seen in model.nodes[node.host].xids),
                )
                for node in record.nodes
            ),
            ranks=tuple(
                RankView(
                    rank=rank.rank,
                    host=rank.host,
                    node_rank=rank.node_rank,
                    local_rank=rank.local_rank,
                    state=rank.state.value,
                    step=rank.step,
                    loss=_finite(rank.loss),
                    samples_per_s=_finite(rank.samples_per_s),
                    step_time_s=_finite(rank.step_time_s),
                    cuda_peak_mib=_finite(rank.cuda_peak_mib),
                    rss_mib=_finite(rank.rss_mib),
                    hung=None if judgement.hang is None else judgement.hang.part(rank.rank),
                    compute_s=_finite(rank.compute_s),
                    **_straggling(named.get(rank.rank)),
                    start_step=rank.start.start_step if rank.start else None,
                    resumed_from=rank.start.resumed_from if rank.start else None,
                    **_last_line(model.logs.get(rank.rank)),
                )
                for rank in model.progress.ranks
            ),
            progress=model.progress.format_line(judgement.stragglers),
            diagnoses=tuple(model.diagnoses()),
        )

    def live_document(self) -> dict[str, Any]:
        """What the supervisor knows beyond the record (its ``snapshot`` answer)."""
        return {
            "judgement": judgement_document(self.judgement),
            "nodes": [
                {
                    "host": node.host,
                    "alive": node.alive,
                    "exit": node.exit,
                    "not_answering": node.note,
                    "sample": sample_document(node.sample),
                    "xids": list(node.xids),
                }
                for node in self.nodes
            ],
            "ranks": [vars(rank) for rank in self.ranks],
            "progress": self.progress,
            "errors": [
                {
                    "category": diagnosis.category.value,
                    "message": diagnosis.message,
                    "cause": diagnosis.cause,
                    "fix": diagnosis.fix,
                    "ranks": list(diagnosis.ranks),
                    "hosts": list(diagnosis.hosts),
                    "count": diagnosis.count,
                    "example": diagnosis.example,
                    "first_time": diagnosis.first_time,
                    "detail": diagnosis.detail,
                }
                for diagnosis in self.diagnoses
            ],
        }

    @classmethod
    def from_live_document(cls, record: RunRecord, document: Mapping[str, Any]) -> RunView:
        """:meth:`live_document` back as a view of ``record``; ``ValueError`` when malformed."""
        try:
            nodes = {item["host"]: item for item in document["nodes"]}
            return cls(
                record=record,
                judgement=judgement_of(document["judgement"]),
                nodes=tuple(
                    NodeView(
                        host=node.host,
                        node_rank=node.node_rank,
                        nproc=node.nproc,
                        run_dir=node.run_dir,
                        alive=_optional(nodes.get(node.host, {}).get("alive"), bool),
                        exit=_optional(nodes.get(node.host, {}).get("exit"), int),
                        note=_optional(nodes.get(node.host, {}).get("not_answering"), str),
                        sample=sample_of(nodes.get(node.host, {}).get("sample")),
                        xids=_texts(nodes.get(node.host, {}).get("xids")),
                    )
                    for node in record.nodes
                ),
                ranks=tuple(_rank_view(rank) for rank in document["ranks"]),
                progress=str(document["progress"]),
                diagnoses=tuple(
                    Diagnosis(
                        category=Category(error["category"]),
                        cause=str(error["cause"]),
                        fix=str(error["fix"]),
                        message=str(error["message"]),
                        example=str(error["example"]),
                        ranks=tuple(int(rank) for rank in error["ranks"]),
                        hosts=tuple(str(host) for host in error["hosts"]),
                        count=int(error["count"]),
                        first_time=float(error["first_time"]),
                        detail=_optional(error.get("detail"), str),
                    )
                    for error in document["errors"]
                ),
            )
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"not a run snapshot: {error!r}") from None

    def document(self, now: float | None = None) -> dict[str, Any]:
        """The ``ddptui status --json`` document (docs/cli.md), as of ``now`` (the
        wall clock's, unless given)."""
        now = time.time() if now is None else now
        record, live = self.record, self.live_document()
        by_host = {node["host"]: node for node in live["nodes"]}
        timeline, hosts = record.timeline(), [node.host for node in record.nodes]
        return {
            "id": record.id,
            "state": self.judgement.state.value,
            "detail": self.judgement.detail,
            "doing": self.judgement.doing or None,
            "demo": record.demo,
            "created": record.created,
            "entry": record.entry,
            "backend": record.backend,
            "world_size": record.world_size,
            "master_addr": record.master_addr,
            "attempts": [
                {
                    "number": attempt.number,
                    "started": attempt.started,
                    "ended": attempt.ended,
                    "master_port": attempt.master_port,
                    "outcome": attempt.outcome or None,
                    "detail": attempt.detail or None,
                    "scheduler": (
                        None if attempt.scheduler is None else scheduler_document(attempt.scheduler)
                    ),
                    "allocation": attempt.allocation or None,
                }
                for attempt in record.attempts
            ],
            "states": [
                {"state": change.state.value, "time": change.time, "detail": change.detail}
                for change in record.states
            ],
            "launch": None if timeline is None else timeline.to_json(hosts),
            "nodes": [
                {
                    "host": node.host,
                    "node_rank": node.node_rank,
                    "nproc": node.nproc,
                    "run_dir": node.run_dir,
                    **{key: value for key, value in by_host[node.host].items() if key != "host"},
                }
                for node in self.nodes
            ],
            "ranks": live["ranks"],
            "progress": self.progress,
            "hang": live["judgement"]["hang"],
            "errors": [{key: error[key] for key in _ERROR_KEYS} for error in live["errors"]],
            "incidents": [incident.to_json() for incident in record.incidents],
            "effective_training_time_ratio": effective_training_time_ratio(record, now),
            "set_aside": [host.to_json() for host in record.set_aside],
        }


def scheduler_document(job: SchedulerJob) -> dict[str, str | bool | None]:
    """A scheduler's job as the JSON documents give it (``status``'s attempts, ``runs``' jobs):
    its id, how the scheduler says it ended (null until known), and whether recovery started
    the attempt in the job's allocation (not the scheduler)."""
    return {"job": job.id, "state": job.state or None, "in_allocation": job.in_allocation}


_ERROR_KEYS = ("category", "message", "cause", "fix", "ranks", "hosts", "count")


def _straggling(straggler: Straggler | None) -> dict[str, Any]:
    """A rank's straggler fields, as the supervisor's judgement names it (or not)."""
    if straggler is None:
        return {"straggler": False}
    return {
        "straggler": True,
        "slower_by": _finite(straggler.slower_by),
        "slow_since": straggler.since,
        "slow_cause": straggler.cause or None,
    }


def _last_line(lines: Sequence[RankLog] | None) -> dict[str, Any]:
    if not lines:
        return {}
    return {"last_line": lines[-1].text, "last_line_at": lines[-1].at}


def _texts(value: Any) -> tuple[str, ...]:
    """A list of texts as the supervisor sent it; () for anything else."""
    if not isinstance(value, list) or not all(isinstance(text, str) for text in value):
        return ()
    return tuple(value)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _optional(value: Any, kind: type) -> Any:
    """``value`` when it is None or a ``kind`` (a bool is no int); ``TypeError`` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
        raise TypeError(f"expected {kind.__name__}, found {type(value).__name__}")
    return value


_RANK_FIELDS = frozenset(each.name for each in fields(RankView))


def _rank_view(document: Mapping[str, Any]) -> RankView:
    """A rank's part of a snapshot; what this version does not know is left out (a supervisor
    of the version before, still following its run after an upgrade, sends ``stalled``)."""
    return RankView(**{key: value for key, value in document.items() if key in _RANK_FIELDS})
