"""How a followed attempt ended, pure (:func:`verdict`): a failure, named by the node of its
root cause; a completion; a stop. From the run's model (what the followed lines and the hosts'
heartbeats say); :mod:`.judging` asks it first, before any hang."""

from __future__ import annotations

import signal

from ddptui.run.following.model import RunModel
from ddptui.run.following.state import NewXid, NodeState, Silence, Verdict
from ddptui.run.record import RunState

EXIT_SETTLE_S = 3.0
"""After a node's torchrun exits non-zero, how long the verdict may wait for the root cause and
its own node's exit: torchrun ends a failed rank's peers too, and their node can report first."""


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
    it completed is completion whatever the exits (a crash on the way out, said); then a
    torchrun that outlived every rank of its node (:meth:`NodeState.launcher_outlived`) waits
    in torch's exit barrier for a node that failed, up to 300 s, and has done its part.
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
    nodes = sorted(model.nodes.values(), key=lambda item: item.node_rank)
    for node in nodes:
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
    now = model.clock()
    outlived = [node for node in nodes if node.launcher_outlived(now)] if trained else []
    left = {node.host for node in outlived}
    if all(node.exit is not None or node.vanished or node.host in left for node in nodes):
        crashed = sorted(
            (node for node in nodes if node.exit), key=lambda node: node.exited_at or 0.0
        )
        if crashed and trained:
            node = crashed[0]
            return Verdict(
                RunState.COMPLETED,
                f"every rank completed its training, then torchrun on {node.host} (node "
                f"{node.node_rank}) {_exit_text(node.exit or 0)}: a crash on the way out, the "
                f"training and its last checkpoint whole{_outlived_words(outlived)}",
            )
        if crashed and not stopping:
            return None  # a failure whose root cause may be a moment behind
        if stopping:
            return Verdict(RunState.STOPPED, "stopped on request")
        if outlived:
            return Verdict(
                RunState.COMPLETED, f"every rank completed its training{_outlived_words(outlived)}"
            )
        return Verdict(RunState.COMPLETED, "every node exited 0")
    return None


def _outlived_words(outlived: list[NodeState]) -> str:
    if not outlived:
        return ""
    hosts = ", ".join(node.host for node in outlived)
    return (
        f"; torchrun outlived every rank on {hosts} (its exit barrier waits for a node that "
        "failed): ended"
    )


def _exit_text(status: int) -> str:
    # The wrapper's shell reports a command killed by signal N as 128 + N.
    if status > 128:
        try:
            name = signal.Signals(status - 128).name
        except ValueError:
            name = f"signal {status - 128}"
        return f"was killed by {name} (exit {status})"
    return f"exited {status}"
