"""Judging a followed attempt, pure: how it ended (:func:`verdict`), whether it hangs
(:func:`hang`), which ranks are stragglers (:func:`slow_ranks`), and what the supervisor should
do next (:func:`judge`), from the run's model (:class:`~ddptui.run.following.model.RunModel`:
what the followed lines say) and its record.

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
import signal
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ddptui.config.model import JobConfig
from ddptui.run.following.model import RunModel
from ddptui.run.following.progress import RankProgress, RunProgress
from ddptui.run.following.state import (
    Hang,
    NewXid,
    RankAtHang,
    Silence,
    Straggler,
    Verdict,
)
from ddptui.run.record import RunState

EXIT_SETTLE_S = 3.0
"""After a node's torchrun exits non-zero, how long the verdict may wait for the root cause and
its own node's exit: torchrun ends a failed rank's peers too, and their node can report first."""
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
    done = _hosts_all_done(model)
    witnesses = [host for host in model.witnesses() if host not in done]
    if not witnesses or model.stopped_ranks:
        return None
    if not model.starts:
        return _quiet_hang(model, witnesses, override)
    now = model.clock()
    stepped = [model.stepped_at[host] for host in witnesses if host in model.stepped_at]
    if stepped:
        last, window = max(stepped), hang_window(model, override)
    elif model.attempt_steps:
        return None  # the steps came from hosts that do not answer now: theirs to judge
    else:
        last, window = model.began, max(hang_window(model, override), FIRST_STEP_HANG_S)
    phased = [model.phased_at[host] for host in witnesses if host in model.phased_at]
    last = max([last, *phased])
    in_phase = phase_window(model)
    if in_phase is not None:
        window = max(window, in_phase)
    if now - last <= window:
        return None
    return Hang(
        since=model.wall() - (now - last),
        window_s=window,
        step=min(
            (rank.step for rank in model.progress.ranks if rank.step is not None),
            default=None,
        )
        if model.attempt_steps
        else None,
        ranks=_ranks_at_hang(model),
    )


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


def _failed_exit(model: RunModel, stopping: bool) -> Verdict | None:
    """The failure that non-zero exits say, naming the node of the first failure's root
    cause; None while there is none, or while that node's exit may be a moment behind."""
    if stopping:
        return None
    failed = sorted(
        (node for node in model.nodes.values() if node.exit not in (None, 0)),
        key=lambda node: node.exited_at or 0.0,
    )
    if not failed:
        return None
    failure = model.diagnoser.first_failure()
    culprit = next((node for node in failed if failure and node.host == failure.host), None)
    root = failure is not None and failure.category.role == "root"
    settling = model.clock() - (failed[0].exited_at or 0.0) < EXIT_SETTLE_S
    if settling and (culprit is None or not root):
        return None
    node = culprit or failed[0]
    why = f"torchrun on {node.host} (node {node.node_rank}) {_exit_text(node.exit or 0)}"
    if failure is not None:
        rank = "torchrun" if failure.rank is None else f"rank {failure.rank}"
        why += f"; first failure: {rank} on {failure.host} ({failure.category.value})"
    return Verdict(RunState.FAILED, why, node.host)


def verdict(model: RunModel, *, stopping: bool = False) -> Verdict | None:
    """How the attempt ended, or None while it goes on (:func:`_ended`); a failure on a run
    where a GPU logged an Xid of its own fault is said with that Xid first, and its host is
    the one named: a GPU off the bus takes its rank down, and the peers' "connection reset"
    follows."""
    found = _ended(model, stopping=stopping)
    if found is None or found.state is not RunState.FAILED:
        return found
    first = gpu_fault(model)
    if first is None:
        return found
    host, xid = first
    return Verdict(RunState.FAILED, f"{xid.words(host)}; {found.detail}", host)


def hang_words(model: RunModel, hang: Hang, now: float) -> str:
    """What the record says of ``hang`` as it is judged: a GPU's own Xid first, as for a
    failure (:func:`verdict`), then the hang's summary."""
    first = gpu_fault(model)
    summary = hang.summary(now)
    return summary if first is None else f"{first[1].words(first[0])}; {summary}"


def gpu_fault(model: RunModel) -> tuple[str, NewXid] | None:
    """The host and the first Xid of a GPU's own fault logged during the attempt, if any."""
    faults = [(host, xid) for host, node in model.nodes.items() if (xid := node.gpu_fault())]
    return min(faults, key=lambda found: found[1].at, default=None)


def _ended(model: RunModel, *, stopping: bool) -> Verdict | None:
    """How the attempt ended, or None while it goes on.

    A node whose torchrun exits non-zero fails the run, unless a stop was asked for (then
    a non-zero exit is the stop's doing); the verdict names the node of the first failure's
    root cause, waiting up to ``EXIT_SETTLE_S`` for it. So does a node that stops answering
    while the ranks on the hosts that answer stop stepping too; while they keep stepping the
    silent host takes part in their collectives, and when no host answers (or every one
    that does has finished) nothing can be judged until one does. All nodes exiting 0 is
    completion, or a stop when the ranks said they stopped on request; every rank having said
    it completed is completion whatever the exits (a crash on the way out, said).
    """
    # Ranks that stopped on request in this attempt (a `touch control/stop` on node 0, say).
    stopping = stopping or bool(model.stopped_ranks)
    # Every rank said it completed: the training and its last checkpoint are whole, and an
    # exit that is not 0 is a crash on the way out (a library's thread torn down at exit).
    world = model.progress.world_size or 0
    trained = not stopping and world > 0 and model.completed_ranks >= set(range(world))
    failed = None if trained else _failed_exit(model, stopping)
    if failed is not None:
        return failed
    for node in sorted(model.nodes.values(), key=lambda item: item.node_rank):
        if node.vanished and node.exit is None and not stopping:
            return Verdict(
                RunState.FAILED,
                f"the processes on {node.host} (node {node.node_rank}) are gone without an "
                "exit status: killed as a group (kill -9, the OOM killer?)",
                node.host,
            )
        # A host whose torchrun already exited 0 has done its part, silent or not.
        if (
            node.silent is not None
            and node.exit is None
            and not stopping
            and model.silence() is Silence.FAILS
        ):
            # Only ranks that stepped before can be said to have stopped stepping.
            stepped = model.stepped_witnesses()
            peers = "; the other hosts' ranks stopped stepping too" if stepped else ""
            return Verdict(
                RunState.FAILED,
                f"{node.host} (node {node.node_rank}) stopped answering: {node.silent}{peers}",
                node.host,
            )
    if all(node.exit is not None or node.vanished for node in model.nodes.values()):
        crashed = sorted(
            (node for node in model.nodes.values() if node.exit),
            key=lambda node: node.exited_at or 0.0,
        )
        if crashed and trained:
            node = crashed[0]
            return Verdict(
                RunState.COMPLETED,
                f"every rank completed its training, then torchrun on {node.host} (node "
                f"{node.node_rank}) {_exit_text(node.exit or 0)}: a crash on the way out, the "
                "training and its last checkpoint whole",
            )
        if crashed and not stopping:
            return None  # a failure whose root cause may be a moment behind
        if stopping:
            return Verdict(RunState.STOPPED, "stopped on request")
        return Verdict(RunState.COMPLETED, "every node exited 0")
    return None


def _exit_text(status: int) -> str:
    # The wrapper's shell reports a command killed by signal N as 128 + N.
    if status > 128:
        try:
            name = signal.Signals(status - 128).name
        except ValueError:
            name = f"signal {status - 128}"
        return f"was killed by {name} (exit {status})"
    return f"exited {status}"


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
    """Nothing to do."""


Decision = Conclude | Hung | SteppingAgain | GoesOn


def judge(model: RunModel, state: RunState, job: JobConfig) -> Decision:
    """What to do about the attempt the supervisor follows (its record in ``state``)."""
    ended = verdict(model)
    if ended is not None:
        return Conclude(ended)
    hung = hang(model, job.hang_timeout_s)
    if hung is not None:
        return Hung(hung, newly=state is RunState.RUNNING, stop=job.on_hang == "stop")
    if state is RunState.HUNG:
        return SteppingAgain()
    return GoesOn()


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
