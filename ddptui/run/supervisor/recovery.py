"""What the supervisor does when an attempt fails and the hosts file's ``[recovery]`` is on:
which host is at fault and why (:func:`blame`), then set it aside and resume on a spare, or
give up, saying why (:func:`decide`). Pure: the supervisor acts on what these say.

A fault in the code is not a node fault: a rank that raised, a loss that went non-finite, a
CUDA out-of-memory on a model that does not fit, a peer's "remote process exited" are the
same on any host, and resuming on another would fail again. Only what a host did blames it:
its processes gone without an exit status, it stopped answering, a rank or its torchrun
killed by a signal (SIGKILL: the OOM killer, or a person), an NCCL system or CUDA error (the
host's network or GPU), a hang held up by a rank whose process is stopped, a GPU that
logged an Xid of its own fault or whose memory waits for a reset.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ddptui.config import Config
from ddptui.run.backends.base import SparePool
from ddptui.run.diagnose import MAX_RANKS_PER_GROUP, Category
from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Hang, Verdict
from ddptui.run.record import RunRecord
from ddptui.untrusted import plain

HOST_FAULTS = frozenset(
    {Category.KILLED_BY_SIGNAL, Category.NCCL_SYSTEM_ERROR, Category.NCCL_CUDA_ERROR}
)
"""First failures that blame the host they happened on."""


@dataclass(frozen=True)
class Blame:
    """The hosts at fault for an attempt's failure, and why each is."""

    hosts: tuple[str, ...]
    why: str


GPU_BLAMED_XIDS = frozenset({48, 62, 63, 64, 74, 79, 94, 95, 119, 120})
"""Xids that set their host aside: the GPU's memory, its bus, its links or its processor
failed (:data:`ddptui.health.xid.XIDS`), not the program that ran on it."""


def blame_gpu(model: RunModel) -> Blame | None:
    """The host whose GPU logged an Xid of :data:`GPU_BLAMED_XIDS` during the attempt, or
    whose memory waits for a reset (a row remap or page retirement pending): whatever the
    ranks said, resuming there would meet the same GPU."""
    for host, node in model.nodes.items():
        for seen in node.xids:
            if seen.event.code in GPU_BLAMED_XIDS:
                return Blame((host,), seen.words(host))
    for host, node in model.nodes.items():
        for gpu in node.sample.get("gpus") or ():
            if gpu.get("reset_pending") == 1 or gpu.get("remap_failed") == 1:
                index = gpu.get("index")
                return Blame((host,), f"{host} GPU {index}'s memory waits for a reset")
    return None


def blame(verdict: Verdict, model: RunModel) -> Blame | None:
    """Which host failed the attempt that ``verdict`` ended, as ``model`` saw it; None when no
    host can be blamed (the code's fault, or nothing says which)."""
    host = verdict.host
    node = model.nodes.get(host) if host is not None else None
    if host is None or node is None:
        return None
    if node.vanished and node.exit is None:
        return Blame((host,), f"its processes were killed as a group ({host})")
    if node.silent is not None and node.exit is None:
        return Blame((host,), f"{host} stopped answering: {node.silent}")
    failure = model.diagnoser.first_failure()
    if failure is not None and failure.host == host and failure.category in HOST_FAULTS:
        rank = "its torchrun" if failure.rank is None else f"rank {failure.rank}"
        return Blame((host,), f"{rank} on {host} failed first: {failure.category.value}")
    if failure is None and node.exit is not None and node.exit > 128:
        return Blame((host,), f"torchrun on {host} was killed by a signal")
    return None


def blame_lost(lost: Mapping[str, str]) -> Blame | None:
    """The hosts the scheduler lost (host → its words), when it lost any: a node that fails
    under a Slurm job takes its ranks with it, and its peers' "connection reset" may be said
    first, or Slurm's own end of their step."""
    if not lost:
        return None
    hosts = tuple(sorted(lost))
    said = (plain(lost[host], limit=200, one_line=True) for host in hosts)
    why = "; ".join(
        f"the scheduler lost {host} ({words})" for host, words in zip(hosts, said, strict=True)
    )
    return Blame(hosts, why)


def blame_unreachable(unreachable: Mapping[str, str]) -> Blame | None:
    """The hosts that could not be reached when the others were ended (host → why), when
    nothing the run said blames one: a host whose sshd died with the rest of it, or whose link
    went down, fails its peers with no more than "a peer was lost", before it is seen silent."""
    if not unreachable:
        return None
    hosts = tuple(sorted(unreachable))
    said = (plain(unreachable[host], limit=200, one_line=True) for host in hosts)
    why = "; ".join(
        f"{host} could not be reached when the run failed ({reason})"
        for host, reason in zip(hosts, said, strict=True)
    )
    return Blame(hosts, why)


def code_fault(model: RunModel, last: int | None) -> str | None:
    """What the job's code raised, said for a person, when every rank of the attempt raised
    the same (the first of the attempt's failures, and of its own): it would follow the job to
    any host. None otherwise."""
    diagnoses = model.diagnoser.diagnoses()
    if not diagnoses:
        return None
    first = diagnoses[0]
    world = model.record.world_size
    if first.category in HOST_FAULTS or first.category.role != "root":
        return None
    if len(first.ranks) < min(world, MAX_RANKS_PER_GROUP):
        return None
    raised = plain(first.example, limit=200, one_line=True)
    at = f" after step {last}" if last is not None else ""
    return f"your code raised {raised}{at} on every rank"


def not_set_aside(record: RunRecord, hosts: tuple[str, ...]) -> str | None:
    """Why ``hosts`` cannot be taken back into ``record``'s run, or None when each was set
    aside by its recovery."""
    aside = {entry.host for entry in record.set_aside}
    unknown = [host for host in hosts if host not in aside]
    if not unknown:
        return None
    named = ", ".join(sorted(aside)) if aside else "none"
    return (
        f"run {record.id}: {', '.join(unknown)} not set aside, so there is nothing to take back "
        f"(set aside: {named})"
    )


HOST_STATES = {"T": "stopped", "t": "stopped by a debugger"}
"""A hung rank's process states that blame its host: a stopped process runs none of the job's
code, and never goes on by itself. Uninterruptible I/O (``D``) is left out: seen once, it is as
often a page fault on a loaded host as a dead mount, and a false recovery costs a host. A rank
that spins or sleeps in the code is the code's to explain (or a peer's), and blames nothing."""


def blame_hang(hang: Hang) -> Blame | None:
    """The hosts of the ranks that hold ``hang`` up by what their host did (their process
    stopped); None when none does (every rank waits alike, or one runs the
    job's own code: a person should look, with the stacks ``ddptui dump`` kept)."""
    held = [
        (rank, HOST_STATES[rank.process])
        for rank in hang.odd
        if rank.process is not None and rank.process in HOST_STATES
    ]
    if not held:
        return None
    hosts = tuple(dict.fromkeys(rank.host for rank, _ in held))
    why = "; ".join(
        f"rank {rank.rank} on {rank.host}: its process is {state}" for rank, state in held
    )
    return Blame(hosts, f"the run hung: {why}")


@dataclass(frozen=True)
class Replace:
    """Resume with each blamed host (key) replaced by a spare (value), node ranks kept, and
    without the hosts of ``without`` (no spare left for them): the nodes after them move up."""

    swaps: Mapping[str, str]
    without: tuple[str, ...] = ()
    nodes: int = 0
    """The run's nodes after the recovery (said when it goes on with fewer)."""

    @property
    def words(self) -> str:
        said = [f"{spare} in place of {host}" for host, spare in self.swaps.items()]
        if self.without:
            said.append(f"{self.nodes} node(s), without {', '.join(self.without)}")
        return ", ".join(said)


@dataclass(frozen=True)
class GiveUp:
    """Leave the run failed, for a person: why ddptui cannot go on by itself."""

    why: str


def decide(
    config: Config,
    record: RunRecord,
    found: Blame | None,
    now: float,
    last: int | None = None,
    raised: str | None = None,
    *,
    spares: SparePool | None,
    unreachable: Collection[str] = (),
) -> Replace | GiveUp:
    """What recovery does about the failed attempt ``record`` ended with, ``found`` to blame,
    ``spares`` the backend's hosts that may take a place (None, not asked, when no host is
    blamed), ``unreachable`` the hosts that did
    not answer when the others were ended, ``last`` the last step a rank made, ``raised`` what
    :func:`code_fault` says of it.

    In order: a fault in the code is given up at once (resuming would repeat it), and so is one
    that comes back at the step the attempt a recovery started failed at (it follows the job
    from host to host: a leak that runs out of memory there, say); past
    ``max_restarts`` in ``window_s`` it is given up (a run that keeps failing needs a person);
    node 0 holds a script's checkpoints, so losing it is given up too (node 0 at fault but
    still answering hands them to the node that takes its place: the backend's part; the
    bundled trainer's ranks on other nodes wrote rescue checkpoints as the attempt failed,
    which the backend hands on when node 0 does not answer); else each
    blamed host takes the first spare this run has not used or set aside, and with none left
    the run goes on without it down to ``min_nodes`` (the bundled trainer keeps its global
    batch; a script only when ``elastic``)."""
    recovery = config.recovery
    if found is None and raised is not None:
        return GiveUp(f"{raised}: no host is to blame, and it would fail the same on any")
    if found is None:
        return GiveUp("no host is to blame: the fault is in the job's code or its data")
    # The failed attempt's own incident is recorded before this is decided.
    earlier = [
        incident for incident in record.incidents if incident.attempt < record.attempt.number
    ]
    latest = earlier[-1] if earlier else None
    if (
        latest is not None
        and latest.resumed_attempt == record.attempt.number
        and last is not None
        and latest.last_step == last
    ):
        return GiveUp(
            f"attempt {latest.attempt} failed at step {last} too, before recovery resumed it on "
            "other hosts: the fault follows the job, not a host"
        )
    restarts = record.restarts_within(recovery.window_s, now)
    if restarts >= recovery.max_restarts:
        return GiveUp(
            f"{restarts} restart(s) in the last {recovery.window_s:g} s, as many as "
            f"[recovery] max_restarts allows"
        )
    head = record.nodes[0].host if record.nodes else None
    if head in found.hosts and head in unreachable and record.entry != "trainer":
        return GiveUp(
            f"node 0 ({head}) holds the checkpoints, and it did not answer when the run failed"
        )
    assert spares is not None, "a host is blamed: its backend's spares are asked"
    free = record.spares_left(spares.names)
    swaps = dict(zip(found.hosts, free, strict=False))
    short = tuple(host for host in found.hosts if host not in swaps)
    if not short:
        return Replace(swaps)
    fewer = len(record.nodes) - len(short)
    no_spare = (
        f"no spare host left to replace {', '.join(short)} ({spares.said}, every one used or "
        "set aside)"
    )
    if recovery.min_nodes is None:
        return GiveUp(f"{no_spare}; {spares.more}")
    if record.entry != "trainer" and not recovery.elastic:
        return GiveUp(
            f"{no_spare}; your script goes on with fewer nodes only with [recovery] "
            "elastic = true (it must keep its global batch itself)"
        )
    if fewer < recovery.min_nodes:
        return GiveUp(
            f"{no_spare}, and {fewer} node(s) would be fewer than [recovery] min_nodes "
            f"({recovery.min_nodes})"
        )
    return Replace(swaps, short, fewer)


@dataclass(frozen=True)
class FaultTimes:
    """When an attempt's fault happened and where the attempt stood in time, as the model's
    evidence says: what its incident keeps to date the fault and the checkpoint's step."""

    fault_at: float | None
    last_step_at: float | None
    """When the ranks made the attempt's last step (the head node's clock)."""
    step_s: float | None
    """The attempt's seconds per step, as the rank that made that step last said."""


def fault_times(
    model: RunModel, ended: Verdict | Hang, found: Blame | None, last: int | None
) -> FaultTimes:
    """When the fault that ``ended`` the attempt happened, ``found`` to blame, and when its
    ranks made step ``last`` (the latest of them), at what pace.

    A hang's fault is when its ranks last progressed. A failure's comes from the hosts blamed
    (else the host the verdict names) first: a host lost (silent, or its processes killed as a
    group) failed after it was last heard from, or last seen running; else the fault came no
    later than the first word of it, the first failure's line or the first non-zero exit; None
    when nothing dates it.
    """
    # The ranks date their events by their host's clock; the record keeps the head node's.
    offsets = {node.host: node.clock_offset_s or 0.0 for node in model.record.nodes}
    stepped = [
        (rank.last_step_at - offsets.get(rank.host, 0.0), rank.step_time_s)
        for rank in model.progress.ranks
        if last is not None and rank.step == last and rank.last_step_at is not None
    ]
    last_step_at, step_s = max(stepped, key=lambda made: made[0], default=(None, None))
    if isinstance(ended, Hang):
        return FaultTimes(ended.since, last_step_at, step_s)
    hosts = found.hosts if found is not None else (ended.host,) if ended.host else ()
    lost = [
        model.heard_at.get(node.host) if node.silent is not None else node.alive_at
        for node in (model.nodes[host] for host in hosts if host in model.nodes)
        if node.exit is None and (node.silent is not None or node.vanished)
    ]
    last_seen = [at for at in lost if at is not None]
    failure = model.diagnoser.first_failure()
    exits = [
        node.exited_at for node in model.nodes.values() if node.exit and node.exited_at is not None
    ]
    # What arrived is timed by the model's clock; an incident is dated by the wall clock.
    to_wall = model.wall() - model.clock()
    said = [to_wall + at for at in exits] + ([failure.time] if failure is not None else [])
    fault_at = to_wall + min(last_seen) if last_seen else min(said, default=None)
    return FaultTimes(fault_at, last_step_at, step_s)
