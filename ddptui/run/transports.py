"""Which transport reaches a run's nodes (:mod:`ddptui.remote.transport`): SSH for a hosts
file's hosts, ``srun`` steps for a Slurm run's nodes while its job runs, and this machine (the
workdir is shared) once it no longer does."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ddptui.config.model import Config, HostConfig
from ddptui.remote.connection import RemoteCluster
from ddptui.remote.srun import SrunCluster
from ddptui.remote.transport import Transport
from ddptui.run import slurm
from ddptui.run.record import RunRecord


async def transport_for(config: Config, record: RunRecord) -> Transport:
    """What reaches ``record``'s nodes now."""
    return await transport(config, [config.host(node.host) for node in record.nodes], record.job_id)


async def transport(
    config: Config,
    hosts: Sequence[HostConfig],
    job_id: str | None,
    *,
    keepalive_interval: float = 15.0,
    keepalive_count_max: int = 3,
) -> Transport:
    """What reaches ``hosts`` now: SSH for a hosts file's hosts (with these keepalives); for a
    Slurm run's nodes, steps in job ``job_id`` while it runs, this machine otherwise."""
    if config.slurm is None:
        return RemoteCluster.for_config(
            config,
            hosts,
            keepalive_interval=keepalive_interval,
            keepalive_count_max=keepalive_count_max,
        )
    running = job_id is not None and not await asyncio.to_thread(job_ended, job_id)
    return SrunCluster(job_id if running else None, job_ended=job_ended)


def job_ended(job_id: str) -> bool:
    """Whether Slurm says job ``job_id`` no longer runs (its steps can start no more)."""
    try:
        job = slurm.job(job_id)
    except slurm.SlurmError:
        # A controller that does not answer (restarting) has not ended the job: its steps
        # still run, and whether they can be reached is for srun to say.
        return False
    return job is None or job.state != "RUNNING"
