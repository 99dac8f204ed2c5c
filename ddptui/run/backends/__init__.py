"""Where a run runs, one package per kind of cluster: SSH hosts (:mod:`.ssh`) and a Slurm
cluster (:mod:`.slurm`), each with its cluster before a run (:mod:`.cluster`: what
RunControl asks), its backend for the supervisor (:mod:`.base`: what every backend does) and
the way to a run's nodes, as its kind (:mod:`.kind`).

:func:`kind_of` is the one place a hosts file's kind is chosen: everything else asks the kind
it gives for its cluster, its backend or its transport, and nothing outside this package imports
a kind's own modules. :func:`settle` asks every kind's backend."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ddptui.config import Config
from ddptui.run.backends.base import (
    BackendEvent,
    Follower,
    NodesEnded,
    Owner,
    Restarted,
    RunBackend,
    StartFailed,
)
from ddptui.run.backends.kind import Kind
from ddptui.run.backends.slurm.backend import SlurmBackend
from ddptui.run.backends.slurm.kind import SlurmKind
from ddptui.run.backends.ssh.backend import SshBackend
from ddptui.run.backends.ssh.kind import SshKind
from ddptui.run.record import RunRecord
from ddptui.run.store import RunStore


def kind_of(config: Config) -> Kind:
    """``config``'s kind of cluster: a ``[slurm]`` one when the hosts file has that table,
    else its SSH hosts."""
    if config.slurm is not None:
        return SlurmKind(config)
    return SshKind(config)


def backend_for(config: Config, owner: Owner) -> RunBackend:
    """The backend of ``config``'s runs."""
    return kind_of(config).backend(owner)


def settle(
    store: RunStore, records: Iterable[RunRecord], supervised: Callable[[str], bool]
) -> bool:
    """What ended while nobody watched, settled by each backend (:meth:`RunBackend.settle`)
    when the runs are listed; whether a record changed."""
    changed = False
    for backend in (SshBackend, SlurmBackend):
        # Every backend settles its own runs: one that changed a record does not stop the next.
        changed = backend.settle(store, records, supervised) or changed
    return changed


__all__ = [
    "BackendEvent",
    "Follower",
    "Kind",
    "NodesEnded",
    "Owner",
    "Restarted",
    "RunBackend",
    "StartFailed",
    "backend_for",
    "kind_of",
    "settle",
]
