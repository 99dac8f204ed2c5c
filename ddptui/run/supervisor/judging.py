"""Judging a followed attempt, pure: whether it hangs (:func:`hang`), which ranks are
stragglers (:func:`slow_ranks`), and what the supervisor should do next (:func:`judge`: first
how the attempt ended, :func:`.ending.verdict`), from the run's model
(:class:`~ddptui.run.following.model.RunModel`: what the followed lines say) and its record.

The model says what it sees; judging decides, in this order: an attempt that ended is
concluded before anything else; a hang is named (and its stacks taken) once, as the record
goes from running to hung; a hung run that steps again is running again; ``on_hang = "stop"``
stops a hung run once.

A **straggler** is a rank whose own work per step (``compute_s``: its forward pass, in which it
waits for no peer; else its step time), averaged over its latest
:data:`~ddptui.run.following.progress.STRAGGLER_EVENTS` step events, is at least 10% above the
running ranks' median of that average for :data:`STRAGGLER_WINDOW_S` on end (its clock); it is
a straggler no more once it is under 5% above. Under DDP every rank's step time is the slowest
rank's, so a straggler shows only in the work it does alone; an average, not a median, because
a throttled host (a CFS quota) is slow in bursts: most of its steps take the usual time, some a
whole throttled period more. Judged with the rest, the same names reach the record's notes
(:mod:`.stragglers`) and every viewer (the judgement's ``stragglers``)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ddptui.config.model import JobConfig
from ddptui.run.following.model import RunModel
from ddptui.run.following.progress import RankProgress, RunProgress
from ddptui.run.following.state import (
    Hang,
    RankAtHang,
    Straggler,
    Verdict,
)
from ddptui.run.record import RunState
from ddptui.run.supervisor.ending import gpu_fault, verdict

HANG_MIN_S = 20.0
HANG_STEP_TIMES = 10.0
"""The hang window while the ranks train: no step from any answering host for the larger of
``HANG_MIN_S`` and this many of the slowest rank's step-event intervals (``[job]
hang_timeout_s`` overrides it). The parts of training that may go long without a step say so
(phase events), so this window need not cover them."""
FIRST_STEP_HANG_S = 600.0
"""Before an attempt's first step (imports, data, rendezvous, NCCL set-up, compiling the first
step) the window is at least this: NCCL's own default collective timeout, so only what it
would time out counts."""
QUIET_HANG_S = 300.0
"""A script that writes no step events is hung when no rank has written a line for this long
(``[job] hang_timeout_s`` overrides it) while every rank's process sits idle: a training
process that neither computes nor says anything waits for something that does not come. One
that busy-waits (NCCL's collectives spin) cannot be told from one that trains."""
PHASE_HANG_S = 600.0
"""While a rank is in a phase that did not say how long it takes (a checkpoint save, an
evaluation), the window is at least this, as before the first step."""
IDLE_CPU_PCT = 5.0
SPINNING_CPU_PCT = 50.0
"""A rank below ``IDLE_CPU_PCT`` of a core while its peers' median is above this is idle while
they spin (NCCL busy-waits in a collective; a rank that never reached it does not)."""
PROCESS_STATES = {
    "T": "its process is stopped (SIGSTOP, Ctrl-Z or a debugger): it runs nothing until SIGCONT",
    "t": "its process is stopped by a debugger (traced)",
    "D": "its process waits in uninterruptible I/O (a hung filesystem, NFS or device?)",
    "Z": "its process has exited and waits to be reaped",
}
"""The process states (``/proc/PID/stat``) that tell a hung rank from its waiting peers."""
STOPPED = ("T", "t")
STRAGGLER_RATIO: Final = 1.10
STRAGGLER_CLEAR_RATIO: Final = 1.05
STRAGGLER_WINDOW_S: Final = 20.0


def hang_window(model: RunModel, override: float | None = None) -> float:
    """How long without a step counts as a hang: ``override`` (``[job] hang_timeout_s``),
    else the larger of ``HANG_MIN_S`` and ``HANG_STEP_TIMES`` step-event intervals of the
    slowest rank (each at most :data:`~ddptui.run.following.events.MAX_STEP_S`; an interval
    its host's thinning made is not the rank's own, see
    :meth:`~ddptui.run.following.progress.RunProgress.own_paces`)."""
    if override is not None:
        return override
    return max(HANG_MIN_S, HANG_STEP_TIMES * max(model.progress.own_paces(), default=0.0))


def phase_window(model: RunModel) -> float | None:
    """How long the phases the ranks are in may take (the longest, ``PHASE_HANG_S`` for one
    that did not say), or None while every running rank trains. A rank's word is at most
    :data:`~ddptui.run.following.events.MAX_EXPECT_S`: one host cannot switch hang detection off.

    None too while any rank's process is stopped (SIGSTOP, a debugger): no phase finishes
    while a rank that every collective needs runs nothing, whatever phase it was in when it
    stopped."""
    if _any_stopped(model):
        return None
    phases = [
        PHASE_HANG_S if rank.phase_expect_s is None else rank.phase_expect_s
        for rank in model.progress.ranks
        if rank.phase is not None and not rank.state.finished
    ]
    return max(phases, default=None)


def _any_stopped(model: RunModel) -> bool:
    return any(
        seen.get("state") in STOPPED
        for node in model.nodes.values()
        for seen in (node.sample.get("ranks") or {}).values()
    )


def hang(model: RunModel, override: float | None = None) -> Hang | None:
    """The hang, when no host that answers (and has not finished, nor every rank of it said
    it is done) has sent a step or a phase event for the hang window; None while any steps, or
    while nothing can tell (no host answers).

    Before the attempt's first step the window is at least ``FIRST_STEP_HANG_S``, and while a
    rank is in a phase (a checkpoint save…) at least what that phase may take. A script that
    writes no events is judged by its output and its processes' CPU use instead
    (:data:`QUIET_HANG_S`).
    """
    return _hang_or_due(model, override)[0]


def _hang_or_due(model: RunModel, override: float | None) -> tuple[Hang | None, float | None]:
    """:func:`hang`, and while there is none, when (the model's clock) the window from the
    last step or phase event ends: judging looks again then, not at its next tick."""
    done = _hosts_all_done(model)
    witnesses = [host for host in model.witnesses() if host not in done]
    if not witnesses or model.stopped_ranks:
        return None, None
    if not model.starts:
        return _quiet_hang(model, witnesses, override), None
    stepped = [model.stepped_at[host] for host in witnesses if host in model.stepped_at]
    if stepped:
        last, window = max(stepped), hang_window(model, override)
    elif model.attempt_steps:
        return None, None  # the steps came from hosts that do not answer now: theirs to judge
    else:
        last, window = model.began, max(hang_window(model, override), FIRST_STEP_HANG_S)
    phased = [model.phased_at[host] for host in witnesses if host in model.phased_at]
    last = max([last, *phased])
    in_phase = phase_window(model)
    if in_phase is not None:
        window = max(window, in_phase)
    now = model.clock()
    if now - last <= window:
        return None, last + window
    steps = (rank.step for rank in model.progress.ranks if rank.step is not None)
    at = min(steps, default=None) if model.attempt_steps else None
    since = model.wall() - (now - last)
    return Hang(since=since, window_s=window, step=at, ranks=_ranks_at_hang(model)), None


def _hosts_all_done(model: RunModel) -> set[str]:
    """The hosts whose every rank has said it trained to its end or stopped on request: what
    is left there is the processes' exit, which no step or phase tells of. A rank that raised
    is still judged: its exit may hang (an NCCL communicator that never aborts)."""
    ranks = model.progress.ranks
    busy = {rank.host for rank in ranks if not rank.state.ended_well}
    return {rank.host for rank in ranks} - busy


def _quiet_hang(model: RunModel, witnesses: list[str], override: float | None) -> Hang | None:
    """The hang of a script without events: no output from any answering host for the
    window, and every one of their ranks' processes idle or stopped as last sampled. Before
    any output the window is at least ``FIRST_STEP_HANG_S`` (a rendezvous waits idle too)."""
    now = model.clock()
    said = [model.said_at[host] for host in witnesses if host in model.said_at]
    last = max([model.began, *said])
    window = QUIET_HANG_S if override is None else override
    if not said:
        window = max(window, FIRST_STEP_HANG_S)
    if now - last <= window:
        return None
    processes = [
        seen
        for host in witnesses
        for seen in (model.nodes[host].sample.get("ranks") or {}).values()
    ]
    if not processes or not all(_idle(seen) for seen in processes):
        return None
    return Hang(
        since=model.wall() - (now - last),
        window_s=window,
        step=None,
        ranks=_ranks_at_hang(model),
        quiet=True,
    )


def _idle(seen: dict[str, Any]) -> bool:
    """A rank's process as sampled does nothing: stopped, in uninterruptible I/O, or below
    ``IDLE_CPU_PCT`` of a core."""
    cpu = seen.get("cpu_pct")
    return seen.get("state") in PROCESS_STATES or (cpu is not None and cpu < IDLE_CPU_PCT)


def _ranks_at_hang(model: RunModel) -> tuple[RankAtHang, ...]:
    processes: dict[int, tuple[str | None, float | None]] = {}
    for node in model.nodes.values():
        for rank, seen in (node.sample.get("ranks") or {}).items():
            processes[rank] = (seen.get("state"), seen.get("cpu_pct"))
    ranks = model.progress.ranks
    top = max((rank.step for rank in ranks if rank.step is not None), default=None)
    cpus = [cpu for _, cpu in processes.values() if cpu is not None]
    spinning = bool(cpus) and statistics.median(cpus) > SPINNING_CPU_PCT
    # A rank in a phase is not odd for it while another's process is stopped: they all wait.
    stopped = _any_stopped(model)
    seen = [(rank, *processes.get(rank.rank, (None, None))) for rank in ranks]
    whys = [
        _odd(model, rank, state, cpu, spinning=spinning, sampled=bool(processes), stopped=stopped)
        for rank, state, cpu in seen
    ]
    if not any(whys):
        whys = [_behind(rank, top) for rank in ranks]
    return tuple(
        RankAtHang(rank.rank, rank.host, rank.step, state, cpu, why)
        for (rank, state, cpu), why in zip(seen, whys, strict=True)
    )


def _odd(
    model: RunModel,
    rank: RankProgress,
    state: str | None,
    cpu: float | None,
    *,
    spinning: bool,
    sampled: bool,
    stopped: bool,
) -> str | None:
    """What about ``rank``'s host or process sets it apart from its peers in a hang, or
    None."""
    node = model.nodes.get(rank.host)
    if node is not None and node.silent is not None:
        return "its host does not answer"
    if state in PROCESS_STATES:
        return PROCESS_STATES[state]
    if rank.phase is not None and not stopped:
        said = (
            ""
            if rank.phase_expect_s is None
            else f", which it said takes {rank.phase_expect_s:g} s"
        )
        return f"still in its {rank.phase} phase{said}"
    if sampled and state is None and node is not None and node.sample.get("ranks"):
        return "no process of this rank is left on its host"
    if spinning and cpu is not None and cpu < IDLE_CPU_PCT:
        return f"idle ({cpu:.0f}% CPU) while its peers spin"
    return None


def hang_words(model: RunModel, hang: Hang, now: float) -> str:
    """What the record says of ``hang`` as it is judged: a GPU's own Xid first, as for a
    failure (:func:`.ending.verdict`), then the hang's summary."""
    first = gpu_fault(model)
    summary = hang.summary(now)
    return summary if first is None else f"{first[1].words(first[0])}; {summary}"


def _behind(rank: RankProgress, top: int | None) -> str | None:
    """Why ``rank``'s step sets it apart in a hang, or None.

    A collective lets some ranks finish the step that the others still wait in (a ring passes
    on its last chunks one rank at a time), so one step event apart says nothing: the last
    events of innocent ranks differ by that much.
    """
    if top is None or rank.step is None or rank.step + rank.steps_per_event >= top:
        return None
    return f"at step {rank.step}, behind the others (step {top})"


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
    """Nothing to do; ``due``: when (the model's clock) the hang window ends, if nothing
    steps before."""

    due: float | None = None


Decision = Conclude | Hung | SteppingAgain | GoesOn


def judge(model: RunModel, state: RunState, job: JobConfig) -> Decision:
    """What to do about the attempt the supervisor follows (its record in ``state``)."""
    ended = verdict(model)
    if ended is not None:
        return Conclude(ended)
    hung, due = _hang_or_due(model, job.hang_timeout_s)
    if hung is not None:
        return Hung(hung, newly=state is RunState.RUNNING, stop=job.on_hang == "stop")
    if state is RunState.HUNG:
        return SteppingAgain()
    return GoesOn(due)


@dataclass(frozen=True)
class Slow:
    """A rank over the straggler threshold since ``straggler.since`` (its clock), by
    ``straggler.slower_by`` as last judged; ``named`` once it has been for the window."""

    straggler: Straggler
    named: bool


def slow_ranks(progress: RunProgress, before: Mapping[int, Slow]) -> dict[int, Slow]:
    """The ranks slow now (see the module's docstring), given those slow at the last judging
    (``before``: whether a rank between the thresholds is named depends on it).

    Each rank is dated by its latest step event. A rank without an average (not enough step
    events of this attempt yet, or it ended) is not slow; one that cannot be compared (the
    median is no work at all: half the ranks report none) keeps its standing."""
    paced = {
        rank.rank: (rank, pace)
        for rank in progress.ranks
        if not rank.state.finished and (pace := rank.recent_pace) is not None
    }
    median = statistics.median(pace for _, pace in paced.values()) if paced else 0.0
    slow: dict[int, Slow] = {}
    for number, (rank, pace) in paced.items():
        was, ratio = before.get(number), pace / median if median > 0 else math.inf
        if not math.isfinite(ratio) or rank.last_step_at is None:
            if was is not None:
                slow[number] = was
        elif ratio >= STRAGGLER_RATIO or (was is not None and ratio >= STRAGGLER_CLEAR_RATIO):
            since = rank.last_step_at if was is None else was.straggler.since
            straggler = Straggler(rank.rank, rank.host, ratio - 1.0, since)
            # Between the thresholds a rank keeps its standing: named stays named, and a
            # rank not named yet is not named until it is over the threshold again.
            late = ratio >= STRAGGLER_RATIO and rank.last_step_at - since >= STRAGGLER_WINDOW_S
            slow[number] = Slow(straggler, (was is not None and was.named) or late)
    return slow


def stragglers(slow: Mapping[int, Slow]) -> tuple[Straggler, ...]:
    """The ranks of ``slow`` named stragglers, slowest first."""
    named = [each.straggler for each in slow.values() if each.named]
    return tuple(sorted(named, key=lambda straggler: (-straggler.slower_by, straggler.rank)))
