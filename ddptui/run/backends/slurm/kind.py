"""A Slurm cluster as a kind: asked with Slurm's commands, each run's attempt a batch job, its
nodes reached through ``srun`` steps in the job while it runs, and from the login node (the
workdir is shared) once it no longer does."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ddptui.config.model import HostConfig
from ddptui.remote.srun import SrunCluster
from ddptui.remote.target import KEEPALIVE, Keepalive
from ddptui.remote.transport import Transport
from ddptui.run.backends.base import Owner, RunBackend
from ddptui.run.backends.cluster import Cluster
from ddptui.run.backends.kind import Kind
from ddptui.run.backends.slurm.backend import SlurmBackend
from ddptui.run.backends.slurm.cluster import SlurmCluster
from ddptui.run.backends.slurm.commands import job_ended


class SlurmKind(Kind):
    """A hosts file's ``[slurm]``."""

    def cluster(self) -> Cluster:
        return SlurmCluster(self.config)

    def backend(self, owner: Owner) -> RunBackend:
        return SlurmBackend(self.config, owner, self.transport)

    async def transport(
        self,
        hosts: Sequence[HostConfig],
        job_id: str | None,
        keepalive: Keepalive = KEEPALIVE,
    ) -> Transport:
        """Steps in job ``job_id`` while it runs (each reaches the node it names, whichever of
        ``hosts``), this machine otherwise; no SSH, so no keepalives."""
        running = job_id is not None and not await asyncio.to_thread(job_ended, job_id)
        return SrunCluster(job_id if running else None, job_ended=job_ended)
