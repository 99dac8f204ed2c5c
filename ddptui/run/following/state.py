"""The values of a run's model (:class:`~ddptui.run.following.model.RunModel`): each node's part of
the attempt and its small updates, each rank's log lines, and what the supervisor says of the run
(:class:`Judgement`, with a :class:`Hang` or a :class:`Verdict`).

Front ends read these (the rank table, the GPU and log panes, the run's words); the model that
folds a run's lines into them, and the supervisor's judging, make them.
"""

from __future__ import annotations

import enum
import functools
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddptui.health.gpu_health import throttled_by
from ddptui.health.wording import and_list
from ddptui.health.xid import gpu_named, meaning
from ddptui.layout import HostFiles
from ddptui.probe.facts import XidEvent
from ddptui.probe.sections import xid_event
from ddptui.run.record import NodeRecord, RunRecord, RunState
from ddptui.untrusted import plain

RANKS_GONE_LINGER_S = 10.0
"""How long the launchers (torchrun) may outlive every rank of their node: they exit at once
unless torch's exit barrier waits for a node that failed, up to 300 s and deaf to SIGTERM. Then
a stop ends them, and so does a completion (every rank said it completed)."""
LOG_TAIL_LINES = 2000
"""Per rank (and per node for torchrun's own output): enough to read back, bounded."""
LOG_LINE_CHARS = 1024
"""A tail's line is kept to this many characters: the log view shows 1,000 of it (the
diagnosis reads the whole line)."""


class Steps(enum.Enum):
    """How much of the ranks' step events a model reads: nearly every line a run writes is one,
    and reading them is most of what following costs."""

    EVERY = "every"
    """Every one: each rank's whole loss curve (a console charts it)."""
    LATEST = "latest"
    """Each rank's latest, when the model is looked at
    (:meth:`~ddptui.run.following.model.RunModel.read_steps`): its numbers, not every point of its
    curve (the supervisor, twice a second)."""
    NONE = "none"
    """None: a viewer that prints lines and takes the supervisor's judgement for the rest."""


class Silence(enum.Enum):
    """What a silent host means for the run, judged by the hosts that still answer."""

    TRAINS = "trains"
    """Their ranks keep stepping: their collectives need the silent host's ranks, so those take
    part too, and only the head node's link to it is down."""
    FAILS = "fails"
    """Their ranks stopped stepping while they still answered (or, with no step events to
    judge by, they answer and the silent host does not)."""
    UNKNOWN = "unknown"
    """Nothing tells yet: no host answers (the head node's own network?), every one that does
    has finished, or none has been heard from since a whole window without a step (their links
    may be going too)."""


MAX_NEW_XIDS = 16


@dataclass(frozen=True)
class NewXid:
    """An Xid line a host's kernel logged while the attempt ran."""

    at: float
    """When the heartbeat that carried it was sent (the host's clock)."""
    event: XidEvent
    gpu: int | None
    """The GPU at its bus id, where the host's samples name one there."""

    def words(self, host: str) -> str:
        """``node1 GPU 0 (PCI 0000:3b:00) logged Xid 79, the GPU fell off the bus, at
        14:02:11``."""
        gpu = gpu_named(self.gpu, self.event.pci)
        said = meaning(self.event.code).words
        return (
            f"{plain(host, limit=64, one_line=True)} {gpu} logged Xid {self.event.code}, "
            f"{said}, at {clock_time(self.at)}"
        )


def visible_devices(value: str | None) -> tuple[int, ...]:
    """``CUDA_VISIBLE_DEVICES`` as the plan wrote it (``"2,3"``), as GPU indices; () for none
    or for one that is not the plan's (UUIDs, written by a user's own environment)."""
    parts = (value or "").split(",")
    if not all(part.isdigit() and len(part) <= 2 for part in parts):
        return ()
    return tuple(int(part) for part in parts)


@dataclass
class NodeState:
    """One host's part of the current attempt."""

    host: str
    node_rank: int
    nproc: int
    base_rank: int
    files: HostFiles
    """The files of the host's part of the run: the only ones whose lines are taken."""
    exit: int | None = None
    exited_at: float | None = None
    """When the exit status arrived (the model's clock)."""
    vanished: bool = False
    """The node's processes are gone without an exit status (the whole group was killed)."""
    alive_at: float | None = None
    """When a heartbeat last said the attempt's processes live (the model's clock)."""
    ranks_gone_at: float | None = None
    """Since when heartbeats have said the attempt's processes live but none is a rank's (the
    model's clock): only torchrun is left."""
    gone_beats: int = 0
    silent: str | None = None
    """Why the host stopped answering, while it does not answer."""
    alive: bool | None = None
    sample: Mapping[str, Any] = field(default_factory=dict)
    """The latest heartbeat's sample; its ``ranks`` only this node's."""
    torchrun_tail: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_TAIL_LINES))
    devices: tuple[int, ...] = ()
    """The GPUs its ranks were given (``CUDA_VISIBLE_DEVICES``), local rank 0's first."""
    slowed: dict[int, tuple[float, str]] = field(default_factory=dict)
    """GPU index → since when (the host's clock) its heartbeats have said a fault slows it,
    and what (:func:`~ddptui.health.gpu_health.throttled_by`'s words)."""
    xids: list[NewXid] = field(default_factory=list)
    """The Xid lines the host's kernel logged during the attempt, as its heartbeats sent them
    (at most :data:`MAX_NEW_XIDS`: the first, which tell what went wrong first)."""

    @classmethod
    def planned(cls, record: RunRecord, node: NodeRecord) -> NodeState:
        """``node``'s part of ``record``'s attempt as planned, before anything of it is heard."""
        devices = visible_devices(node.env.get("CUDA_VISIBLE_DEVICES"))
        start, files = record.ranks_of(node).start, record.host_files(node)
        return cls(node.host, node.node_rank, node.nproc, start, files, devices=devices)

    def holds(self, rank: int) -> bool:
        """Whether global rank ``rank`` runs on this node, as planned."""
        return self.base_rank <= rank < self.base_rank + self.nproc

    def gpu_of(self, rank: int) -> int:
        """The GPU global rank ``rank`` of this node uses: its local rank's, among those it
        was given (with none given, the GPU numbered as its local rank)."""
        local = rank - self.base_rank
        return self.devices[local] if local < len(self.devices) else local

    def slowed_cause(self, rank: int) -> str:
        """What slows rank ``rank``'s GPU, as its host's heartbeats say; "" when nothing."""
        gpu = self.gpu_of(rank)
        slowed = self.slowed.get(gpu)
        if slowed is None:
            return ""
        since, words = slowed
        return f"its GPU {gpu} has been slowed by {words} since {clock_time(since)}"

    def beat(
        self, alive: bool | None, sample: Mapping[str, Any], at: float = 0.0, now: float = 0.0
    ) -> int:
        """Take a heartbeat (sent at ``at``, the host's clock; taken at ``now``, the model's):
        whether the attempt's processes live, and the host's sample of them, of which only this
        node's ranks are kept (a host's word on others' is not taken); how many other ranks it
        named."""
        self._watch_gpus(sample.get("gpus") or (), at)
        self._take_xids(sample.get("xids") or (), sample.get("gpus") or (), at)
        self.alive = alive
        ranks = sample.get("ranks")
        refused = 0
        if ranks:
            own = {rank: seen for rank, seen in ranks.items() if self.holds(rank)}
            refused = len(ranks) - len(own)
            sample = {**sample, "ranks": own}
        self.sample = sample
        if alive:
            self.alive_at = now
            ranks_gone = sample.get("ranks") == {}
            gone_since = self.ranks_gone_at if self.ranks_gone_at is not None else now
            self.ranks_gone_at = gone_since if ranks_gone else None
        # The wrapper records torchrun's exit status as it ends; a group gone for two
        # heartbeats with none was killed whole (kill -9 -PGID, the OOM killer).
        self.gone_beats = self.gone_beats + 1 if alive is False else 0
        if self.exit is None and self.gone_beats >= 2:
            self.vanished = True
        return refused

    def launcher_outlived(self, now: float) -> bool:
        """Whether torchrun alone has been left of this node's attempt for
        :data:`RANKS_GONE_LINGER_S` (by ``now``, the model's clock), and answers still."""
        gone = self.ranks_gone_at
        lingered = gone is not None and now - gone >= RANKS_GONE_LINGER_S
        return lingered and self.exit is None and not self.vanished and self.silent is None

    def _take_xids(self, lines: Any, gpus: Any, at: float) -> None:
        on_bus = {gpu.get("pci_bus_id"): gpu.get("index") for gpu in gpus}
        for line in lines:
            event = xid_event(line)
            if event is None or len(self.xids) >= MAX_NEW_XIDS:
                continue
            index = on_bus.get(event.pci)
            self.xids.append(NewXid(at, event, index if isinstance(index, int) else None))

    def gpu_fault(self) -> NewXid | None:
        """The first Xid of the attempt that the GPU's fault causes (not a program's)."""
        return next((seen for seen in self.xids if not meaning(seen.event.code).program), None)

    def _watch_gpus(self, gpus: Any, at: float) -> None:
        slowed: dict[int, tuple[float, str]] = {}
        for gpu in gpus:
            index, mask = gpu.get("index"), gpu.get("throttle_reasons")
            if not isinstance(index, int) or not isinstance(mask, int):
                continue
            reasons = throttled_by(mask)
            if reasons:
                was = self.slowed.get(index)
                words = and_list([reason.words for reason in reasons])
                slowed[index] = (was[0] if was is not None else at, words)
        self.slowed = slowed


@dataclass(frozen=True)
class RankLog:
    """A line from one rank's stdout or stderr (text raw: sanitise to show)."""

    rank: int
    stream: str
    text: str
    at: float
    """When it arrived (the model's wall clock)."""


@dataclass(frozen=True)
class Verdict:
    state: RunState
    detail: str
    host: str | None = None


@dataclass(frozen=True)
class RankAtHang:
    """Where one rank is while the run hangs."""

    rank: int
    host: str
    step: int | None
    process: str | None
    """Its process state as the host last saw it (``R``, ``S``, ``T``…), if known."""
    cpu_pct: float | None
    why: str | None
    """Why it differs from the other ranks, or None when it looks like them."""


@dataclass(frozen=True)
class Straggler:
    """A rank slower than its peers, as judging says: where, by how much, since when it is (its
    clock)."""

    rank: int
    host: str
    slower_by: float
    since: float
    cause: str = ""
    """What its host says slows it, where it says: ``its GPU 3 has been slowed by its own
    heat (hardware thermal slowdown) since 14:02:05``."""

    def words(self) -> str:
        """``rank 3 on node1 +45% since 14:02:11``, then its cause where one is known."""
        cause = f": {plain(self.cause, limit=200, one_line=True)}" if self.cause else ""
        return (
            f"rank {self.rank} on {plain(self.host, limit=64, one_line=True)} "
            f"+{self.slower_by:.0%} since {clock_time(self.since)}{cause}"
        )


def clock_time(at: float) -> str:
    """``14:02:11``, or ``?`` for a time no clock shows: any code may build a value that is
    said with one (a host's time), and saying it must not end the judging that names it."""
    try:
        return time.strftime("%H:%M:%S", time.localtime(at))
    except (OverflowError, OSError, ValueError):
        return "?"


STUCK = "stuck"
WAITING = "waiting"


@dataclass(frozen=True)
class Hang:
    """No answering host's ranks have stepped for ``window_s``: what each rank is doing."""

    since: float
    """Wall-clock time of the last step seen (or of the attempt's start, before any)."""
    window_s: float
    step: int | None
    """The lowest step over the ranks: where the run as a whole stands."""
    ranks: tuple[RankAtHang, ...]
    quiet: bool = False
    """Judged by output and CPU (the script writes no step events): no rank wrote a line, and
    every rank's process sat idle, for the window."""

    @property
    def odd(self) -> tuple[RankAtHang, ...]:
        return tuple(rank for rank in self.ranks if rank.why is not None)

    def part(self, rank: int) -> str | None:
        """``rank``'s part in the hang, as every viewer marks it: :data:`STUCK` when something
        about it sets it apart (its process stopped, its host silent…), :data:`WAITING` when
        it looks like the others (it waits for the stuck ones in a collective), None for a
        rank the hang does not name."""
        return self._parts.get(rank)

    @functools.cached_property
    def _parts(self) -> dict[int, str]:
        # Asked once a rank for each redraw: at thousands of ranks, a search each would show.
        return {each.rank: STUCK if each.why is not None else WAITING for each in self.ranks}

    @property
    def without(self) -> str:
        """What the window went without."""
        return "output or CPU use" if self.quiet else "a step"

    @property
    def where(self) -> str:
        """Where the run stands: at a step, before the first, or (judged by its output) ""."""
        if self.quiet:
            return ""
        return f" at step {self.step}" if self.step is not None else " before the first step"

    def summary(self, now: float) -> str:
        """One line: how long, at which step, and which ranks differ (the first few)."""
        what = "no output and no CPU use" if self.quiet else "no step"
        line = f"{what} for {max(now - self.since, 0.0):.0f} s{self.where}"
        odd = self.odd
        if not odd:
            return line + "; every rank waits alike (a collective that never completes?)"
        told = "; ".join(f"rank {rank.rank} on {rank.host}: {rank.why}" for rank in odd[:3])
        more = f"; {len(odd) - 3} more" if len(odd) > 3 else ""
        return f"{line}; {told}{more}"


@dataclass(frozen=True)
class Judgement:
    """What the supervisor says of the run now: viewers show this and judge nothing."""

    state: RunState
    attempt: int
    detail: str
    """Why the run is in its state (the record's latest detail)."""
    notes: Mapping[str, str] = field(default_factory=dict)
    """Host → what its silence means for the run, for each host that does not answer."""
    hang: Hang | None = None
    progress: str = ""
    """The ranks' progress in one line, as the supervisor's own state has it."""
    stepped: bool = False
    """Some rank has stepped: the progress says something even once the run ended."""
    doing: str = ""
    """What the supervisor does for the run now beyond following it (ending the other nodes
    after a failure…), while it does it."""
    stragglers: tuple[Straggler, ...] = ()
    """The ranks named stragglers, slowest first: as the supervisor's judging named them, which
    every viewer shows rather than judge its own from the events it happens to have read."""

    @classmethod
    def of_record(cls, record: RunRecord) -> Judgement:
        """What the record alone says (no supervisor to ask: a finished run)."""
        attempt = record.attempt.number if record.attempts else 0
        return cls(record.state, attempt, record.detail)
