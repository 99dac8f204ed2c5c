"""Where a run runs: the lifecycle its supervisor needs from SSH hosts or a Slurm allocation
(:mod:`~ddptui.run.backends.base`: what every backend does), and the one place a run's backend
is chosen (:func:`backend_for`), or every backend asked (:func:`settle`)."""

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
from ddptui.run.record import RunRecord
from ddptui.run.store import RunStore


def settle(
    store: RunStore, records: Iterable[RunRecord], supervised: Callable[[str], bool]
) -> bool:
    """What ended while nobody watched, settled by each backend (:meth:`RunBackend.settle`)
    when the runs are listed; whether a record changed."""
    from ddptui.run.backends.slurm import SlurmBackend
    from ddptui.run.backends.ssh import SshBackend

    changed = False
    for backend in (SshBackend, SlurmBackend):
        # Every backend settles its own runs: one that changed a record does not stop the next.
        changed = backend.settle(store, records, supervised) or changed
    return changed


def backend_for(config: Config, owner: Owner) -> RunBackend:
    """The backend of ``config``'s runs."""
    if config.slurm is not None:
        from ddptui.run.backends.slurm import SlurmBackend

        return SlurmBackend(config, owner)
    from ddptui.run.backends.ssh import SshBackend

    return SshBackend(config, owner)


__all__ = [
    "BackendEvent",
    "Follower",
    "NodesEnded",
    "Owner",
    "Restarted",
    "RunBackend",
    "StartFailed",
    "backend_for",
    "settle",
]
