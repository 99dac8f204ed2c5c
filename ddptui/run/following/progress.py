"""A run's progress per rank, built from its events: what the console and ``--headless`` show.

:class:`RunProgress` takes every rank's events (:meth:`RunProgress.apply`) and keeps one
:class:`RankProgress` per rank: where it is, its latest numbers, a bounded loss curve and its
own work per step in its latest :data:`STRAGGLER_EVENTS` step events.
:meth:`RunProgress.summary` folds the ranks into the one line ``--headless`` prints.

It keeps numbers, not verdicts: whether the ranks hang, and which are stragglers, is decided
from these numbers by the supervisor's judging (``supervisor/judging.py``), once, and shown to
every viewer with its judgement. A model that decided from the events it happened to read
would say something else than the record and the other viewers at the same moment.

Times are the ranks' own (the events' ``time``).
"""

from __future__ import annotations

import enum
import math
import statistics
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from .bands import halved_when_full
from .events import (
    MAX_STEP_S,
    CheckpointEvent,
    DoneEvent,
    ErrorEvent,
    PhaseEvent,
    RankEvent,
    StartEvent,
    StepEvent,
    StopRequestedEvent,
)
from .logloss import LoggedLoss
from .state import Straggler

STRAGGLER_EVENTS: Final = 20
"""A rank's work per step is kept for this many of its latest step events: what judging
averages it over (an average, since a throttled host is slow in bursts)."""
LOSS_POINTS: Final = 1024
"""A rank's loss curve holds at most this many points; a longer run is down-sampled. A chart
is a few hundred dots wide: more would cost memory on every rank and show nothing more."""
LOSS_POINTS_IN_ALL: Final = 262_144
"""And all ranks' together about this many (30 MiB; 256 a rank at 1,024 ranks: bands chart)."""
MAX_RANKS: Final = 16384
"""Ranks beyond this many are not tracked: a host's nonsense, not a run (each keeps a curve)."""


class RankState(str, enum.Enum):
    STARTING = "starting"
    """Known (from the plan or a first event) but not stepping yet."""
    RUNNING = "running"
    STOPPING = "stopping"
    """A stop was requested; the rank is checkpointing on its way out."""
    DONE = "done"
    """Completed every step."""
    STOPPED = "stopped"
    """Ended early on request, with a checkpoint."""
    FAILED = "failed"
    KILLED = "killed"
    """Killed by a signal: the first failure of its run."""

    @property
    def finished(self) -> bool:
        # A set, not a tuple of members: asked of every rank twice a second, and each member
        # named is a lookup on the enum's class.
        return self in _FINISHED

    @property
    def ended_well(self) -> bool:
        """Trained to its end, or stopped on request."""
        return self in _ENDED_WELL


_FINISHED = frozenset({RankState.DONE, RankState.STOPPED, RankState.FAILED, RankState.KILLED})
_ENDED_WELL = frozenset({RankState.DONE, RankState.STOPPED})


@dataclass
class RankProgress:
    """One rank's latest numbers (``None`` until reported) and health."""

    rank: int
    node_rank: int
    local_rank: int
    host: str
    step: int | None = None
    epoch: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    """The latest step event's loss; ``None`` also when it was not finite (see ``nonfinite``)."""
    nonfinite: bool = False
    """The latest step event carried no loss: it was NaN or infinite on the rank."""
    lr: float | None = None
    samples_per_s: float | None = None
    step_time_s: float | None = None
    cuda_allocated_mib: float | None = None
    cuda_peak_mib: float | None = None
    rss_mib: float | None = None
    state: RankState = RankState.STARTING
    started_at: float | None = None
    last_step_at: float | None = None
    """The latest step event's ``time``."""
    steps_per_event: int = 1
    """Steps between the latest two step events: ``--log-every``."""
    last_checkpoint_step: int | None = None
    start: StartEvent | None = None
    """Its latest attempt's start event: its start step, checkpoint, the requests it reads."""
    error: str | None = None
    """The ``error`` event's message (plain, newlines kept)."""
    losses: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=LOSS_POINTS))
    """(step, loss) points; every ``loss_stride``-th step once the curve has been thinned."""
    loss_stride: int = 1
    compute_s: float | None = None
    """The rank's own work per step (``compute_s``), as its latest step event said."""
    paces: deque[float] = field(default_factory=lambda: deque(maxlen=STRAGGLER_EVENTS))
    """Its work per step (else its step time) in its latest step events of this attempt."""
    _recent_pace: float | None = field(default=None, repr=False, compare=False)
    """:attr:`recent_pace`, once worked out since the latest pace came (judging asks of every
    rank twice a second)."""

    @property
    def recent_pace(self) -> float | None:
        """Its work per step over its latest :data:`STRAGGLER_EVENTS` step events, once it has
        that many."""
        if len(self.paces) < STRAGGLER_EVENTS:
            return None
        if self._recent_pace is None:
            self._recent_pace = sum(self.paces) / len(self.paces)
        return self._recent_pace

    def add_pace(self, pace: float) -> None:
        self.paces.append(pace)
        self._recent_pace = None

    def forget_pace(self) -> None:
        """Nothing known of its pace in this attempt (a new attempt, the rank's end)."""
        self.paces.clear()
        self._recent_pace = None

    phase: str | None = None
    """The part of its work the rank said it entered that may go long without a step
    (``checkpoint``, ``eval``…), until its next step; None while it trains."""
    phase_expect_s: float | None = None
    """How long the rank said its phase may take, if it did."""

    @property
    def pace_s(self) -> float | None:
        """How long the rank takes from one step event to the next at its current speed, at
        most :data:`~ddptui.run.following.events.MAX_STEP_S`.

        From the step time rather than the events' times, so that a rank that resumes after a
        long pause does not stretch what counts as a hang for the others. The windows (a hang,
        a silent host's peers) are multiples of it: uncapped, one event of a step far
        ahead of the last would stretch them without end.
        """
        if self.step_time_s is None:
            return None
        return min(self.step_time_s * self.steps_per_event, MAX_STEP_S)


@dataclass(frozen=True)
class ProgressSummary:
    """The whole run in one line's worth of numbers; ``None`` where no rank has said yet."""

    ranks: int
    started: int
    """Ranks that have sent their ``start`` event in this attempt (or stepped)."""
    world_size: int | None
    step: int | None
    """The lowest step over the ranks that have stepped: where the run as a whole is."""
    total_steps: int | None
    loss_min: float | None
    loss_median: float | None
    loss_max: float | None
    nonfinite_ranks: tuple[int, ...]
    samples_per_s: float | None
    """Summed over the running ranks."""
    slowest_rank: int | None
    slowest_step_time_s: float | None
    peak_memory_mib: float | None
    memory_kind: str | None
    """``"gpu"`` (peak CUDA allocation) or ``"cpu"`` (resident set), whichever ranks report."""
    states: Mapping[RankState, int]

    def format_line(self, stragglers: Sequence[Straggler] = ()) -> str:
        """One human line, e.g. ``step 120/400  loss 0.031 / 0.034 / 0.040  2,310 samples/s
        slowest rank 3 (0.052 s)  peak mem 1,204 MiB``, naming ``stragglers`` (slowest first:
        the ranks the supervisor's judging named)."""
        parts = []
        running = self.states.get(RankState.RUNNING, 0)
        if self.states.get(RankState.STARTING, 0) == self.ranks:
            parts.append(f"starting ({self.started} of {self.world_size or '?'} ranks started)")
        elif running and self.step is None:
            parts.append(f"{running} rank(s) running, no step events yet (docs/events.md)")
        if self.step is not None:
            parts.append(f"step {self.step}" + (f"/{self.total_steps}" if self.total_steps else ""))
        losses = (self.loss_min, self.loss_median, self.loss_max)
        if all(loss is not None for loss in losses):
            parts.append("loss " + " / ".join(f"{loss:.4g}" for loss in losses if loss is not None))
        if self.nonfinite_ranks:
            parts.append(f"loss not finite on rank {_ranks(self.nonfinite_ranks)}")
        if self.samples_per_s is not None:
            parts.append(f"{self.samples_per_s:,.0f} samples/s")
        if self.slowest_rank is not None and self.slowest_step_time_s is not None:
            parts.append(f"slowest rank {self.slowest_rank} ({self.slowest_step_time_s:.3g} s)")
        if self.peak_memory_mib is not None:
            label = "peak mem" if self.memory_kind == "gpu" else "max RSS"
            parts.append(f"{label} {self.peak_memory_mib:,.0f} MiB")
        if stragglers:
            named = "; ".join(straggler.words() for straggler in stragglers[:3])
            more = len(stragglers) - 3
            parts.append(f"straggler {named}" + (f" and {more} more" if more > 0 else ""))
        ended = {
            state: n
            for state, n in self.states.items()
            if state.finished or state is RankState.STOPPING
        }
        if ended:
            parts.append(", ".join(f"{n} {state.value}" for state, n in ended.items()))
        return "  ".join(parts)


THINNED_WORLD = 2048
"""Past this many ranks the agent folds a fast rank's step events over world/2,048 seconds
(``ddptui.onhost.thinning.HEAD_EVENTS_PER_S``, which the head does not import; a test holds
the two equal)."""


def thinned_gap_s(world_size: int | None) -> float:
    """The longest a thinned rank's step events are apart as the head receives them: two of
    its folds (a second each, up to :data:`THINNED_WORLD` ranks)."""
    return 2.0 * max(1.0, (world_size or 1) / THINNED_WORLD)


def loss_points(world_size: int | None) -> int:
    """The points a rank's loss curve keeps in a run of ``world_size`` ranks."""
    return max(64, min(LOSS_POINTS, LOSS_POINTS_IN_ALL // max(1, world_size or 1)))


def _record_loss(progress: RankProgress, step: int, loss: float) -> None:
    if progress.losses and step - progress.losses[-1][0] < progress.loss_stride:
        return
    if halved_when_full(progress.losses):
        progress.loss_stride *= 2
    progress.losses.append((step, loss))


def _restart(progress: RankProgress, event: StartEvent) -> None:
    """A new attempt (a resume) starts from its checkpoint's step."""
    if progress.state is not RankState.RUNNING:
        # Running already when its process was seen: a rank never goes back to starting.
        progress.state = RankState.STARTING
    progress.started_at = event.time
    progress.total_steps = event.total_steps
    progress.start = event
    progress.step = event.start_step
    progress.epoch = event.start_epoch
    progress.error = None
    progress.last_step_at = None
    progress.forget_pace()
    progress.phase = progress.phase_expect_s = None
    if event.start_step is not None:
        # Steps after the checkpoint will be taken again; the new values replace them.
        start = event.start_step
        kept = [point for point in progress.losses if point[0] <= start]
        progress.losses.clear()
        progress.losses.extend(kept)


def _ranks(ranks: Iterable[int]) -> str:
    return ", ".join(map(str, ranks))


class RunProgress:
    """Every rank's progress in one run, across its attempts."""

    def __init__(self) -> None:
        self._ranks: dict[int, RankProgress] = {}
        self.world_size: int | None = None
        self.ignored = 0
        """Events of ranks past :data:`MAX_RANKS`, not applied."""

    @property
    def ranks(self) -> list[RankProgress]:
        return [self._ranks[rank] for rank in sorted(self._ranks)]

    def rank(self, rank: int) -> RankProgress | None:
        return self._ranks.get(rank)

    def own_paces(self) -> list[float]:
        """The ranks' step-event intervals that are their own (:attr:`RankProgress.pace_s`),
        for the windows that are multiples of them (a hang, a silent host's peers). An
        interval under :func:`thinned_gap_s` may be how the host thinned the events rather
        than how the rank writes them: left out, it cannot stretch a window (at 4,096 ranks
        the received interval of 16 steps at 5 steps/s made the hang window 32 s, not 20).
        Up to 2,048 ranks that is under 2 s, whose multiples are within the windows' minimums
        anyway."""
        shortest = thinned_gap_s(self.world_size)
        return [
            pace
            for rank in self._ranks.values()
            if (pace := rank.pace_s) is not None and pace >= shortest
        ]

    @property
    def stepped(self) -> bool:
        """Some rank has reported a step (or, resumed, the step it starts from)."""
        return any(progress.step is not None for progress in self._ranks.values())

    def expect(self, host: str, node_rank: int, local_rank: int, rank: int) -> RankProgress | None:
        """A rank the plan starts, shown as STARTING until its first event arrives; ``None``
        past :data:`MAX_RANKS` ranks."""
        known = self._ranks.get(rank)
        if known is None and len(self._ranks) < MAX_RANKS:
            known = self._ranks[rank] = RankProgress(rank, node_rank, local_rank, host)
            known.losses = deque(maxlen=loss_points(self.world_size))
        elif known is not None:
            # A recovery's attempt may run the rank on a spare, or on another node when the
            # run goes on with fewer.
            known.host, known.node_rank, known.local_rank = host, node_rank, local_rank
        return known

    def keep_only(self, ranks: range) -> None:
        """Forget the ranks outside ``ranks``: a run resumed on fewer nodes has no others."""
        for rank in [rank for rank in self._ranks if rank not in ranks]:
            del self._ranks[rank]

    def process_running(self, rank: int) -> None:
        """A process of ``rank`` runs in this attempt: the rank runs, whether or not it writes
        events (a user's script may write none)."""
        progress = self._ranks.get(rank)
        if progress is not None and progress.state is RankState.STARTING:
            progress.state = RankState.RUNNING

    def logged(self, rank: int, logged: LoggedLoss) -> None:
        """A loss ``rank``'s output printed (a script without step events): its step is the one
        printed with it, else the rank's next. Hangs are judged from events alone,
        so it moves no step clock."""
        progress = self._ranks.get(rank)
        if progress is None:
            return
        step = logged.step if logged.step is not None else (progress.step or 0) + 1
        finite = math.isfinite(logged.loss)
        progress.step = step
        progress.loss, progress.nonfinite = (logged.loss if finite else None), not finite
        if finite:
            _record_loss(progress, step, logged.loss)
        if progress.state is RankState.STARTING:
            progress.state = RankState.RUNNING

    def apply(self, host: str, event: RankEvent) -> None:
        """Take one event of the rank that ran on ``host``."""
        progress = self.expect(host, event.node_rank, event.local_rank, event.rank)
        if progress is None:
            self.ignored += 1
            return
        progress.host, progress.node_rank, progress.local_rank = (
            host,
            event.node_rank,
            event.local_rank,
        )
        self.world_size = event.world_size
        if isinstance(event, StartEvent):
            _restart(progress, event)
        elif isinstance(event, StepEvent):
            self._step(progress, event)
        elif isinstance(event, CheckpointEvent):
            progress.last_checkpoint_step = event.step
        elif isinstance(event, PhaseEvent):
            training = event.phase == PhaseEvent.TRAINING
            progress.phase = None if training else event.phase
            progress.phase_expect_s = None if training else event.expect_s
        elif isinstance(event, StopRequestedEvent):
            if not progress.state.finished:
                progress.state = RankState.STOPPING
        elif isinstance(event, DoneEvent):
            progress.state = RankState.STOPPED if event.reason == "stopped" else RankState.DONE
            progress.step = event.step if event.step is not None else progress.step
        elif isinstance(event, ErrorEvent):
            progress.state = RankState.FAILED
            progress.error = event.message
        if progress.state.finished:
            progress.forget_pace()

    def _step(self, progress: RankProgress, event: StepEvent) -> None:
        if progress.step is not None and event.step > progress.step:
            progress.steps_per_event = event.step - progress.step
        progress.last_step_at = event.time
        progress.step, progress.epoch = event.step, event.epoch
        progress.loss, progress.nonfinite = event.loss, event.loss is None
        progress.lr, progress.samples_per_s = event.lr, event.samples_per_s
        progress.step_time_s = event.step_time_s
        progress.compute_s = event.compute_s
        progress.cuda_allocated_mib = event.cuda_allocated_mib
        if event.cuda_peak_mib is not None:
            progress.cuda_peak_mib = event.cuda_peak_mib
        if event.rss_mib is not None:
            progress.rss_mib = event.rss_mib
        if event.loss is not None:
            _record_loss(progress, event.step, event.loss)
        if progress.state in (RankState.STARTING, RankState.RUNNING):
            progress.state = RankState.RUNNING
        progress.phase = progress.phase_expect_s = None
        own = progress.compute_s if progress.compute_s is not None else progress.step_time_s
        if own is not None:
            progress.add_pace(own)

    def summary(self) -> ProgressSummary:
        ranks = self.ranks
        stepped = [p.step for p in ranks if p.step is not None]
        losses = sorted(p.loss for p in ranks if p.loss is not None)
        running = [p for p in ranks if p.state is RankState.RUNNING]
        rates = [p.samples_per_s for p in running if p.samples_per_s is not None]
        timed = [p for p in running if p.step_time_s is not None]
        slowest = max(timed, key=lambda p: p.step_time_s or 0.0) if timed else None
        gpu = [p.cuda_peak_mib for p in ranks if p.cuda_peak_mib is not None]
        cpu = [p.rss_mib for p in ranks if p.rss_mib is not None]
        totals = [p.total_steps for p in ranks if p.total_steps is not None]
        states: dict[RankState, int] = {}
        for p in ranks:
            states[p.state] = states.get(p.state, 0) + 1
        return ProgressSummary(
            ranks=len(ranks),
            started=sum(p.started_at is not None for p in ranks),
            world_size=self.world_size,
            step=min(stepped) if stepped else None,
            total_steps=max(totals) if totals else None,
            loss_min=losses[0] if losses else None,
            loss_median=statistics.median(losses) if losses else None,
            loss_max=losses[-1] if losses else None,
            nonfinite_ranks=tuple(p.rank for p in ranks if p.nonfinite),
            samples_per_s=sum(rates) if rates else None,
            slowest_rank=slowest.rank if slowest else None,
            slowest_step_time_s=slowest.step_time_s if slowest else None,
            peak_memory_mib=max(gpu) if gpu else max(cpu) if cpu else None,
            memory_kind="gpu" if gpu else "cpu" if cpu else None,
            states=states,
        )

    def format_line(self, stragglers: Sequence[Straggler] = ()) -> str:
        return self.summary().format_line(stragglers)
