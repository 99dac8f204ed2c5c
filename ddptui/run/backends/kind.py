"""A kind of cluster, as one hosts file names it: what RunControl asks before a run (its
cluster), what the supervisor runs a run with (its backend), and what reaches a run's nodes (a
transport). :func:`ddptui.run.backends.kind_of` gives a hosts file's kind; each kind is a
package of its own (:mod:`ddptui.run.backends.ssh`, :mod:`ddptui.run.backends.slurm`)."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence

from ddptui.config import Config
from ddptui.config.model import HostConfig
from ddptui.remote.target import KEEPALIVE, Keepalive
from ddptui.remote.transport import Transport
from ddptui.run.backends.base import Owner, RunBackend
from ddptui.run.backends.cluster import Cluster
from ddptui.run.record import RunRecord


class Kind(ABC):
    """One hosts file's kind of cluster: its cluster, its runs' backend, and the way to their
    nodes, each of the same kind."""

    def __init__(self, config: Config) -> None:
        self.config = config

    @abstractmethod
    def cluster(self) -> Cluster:
        """The cluster, before a run: check it, plan a run, record the run."""

    @abstractmethod
    def backend(self, owner: Owner) -> RunBackend:
        """The backend of a run's supervisor (``owner``), which reaches the run's nodes through
        :meth:`transport`."""

    @abstractmethod
    async def transport(
        self,
        hosts: Sequence[HostConfig],
        job_id: str | None,
        keepalive: Keepalive = KEEPALIVE,
    ) -> Transport:
        """What reaches ``hosts`` now (``job_id``: the run's job, where a scheduler runs it;
        the keepalives, where the link is SSH's): a
        :class:`~ddptui.run.following.files.OpenTransport`."""

    async def transport_for(self, record: RunRecord) -> Transport:
        """What reaches ``record``'s nodes now."""
        hosts = [self.config.host(node.host) for node in record.nodes]
        return await self.transport(hosts, record.job_id)

    @contextlib.asynccontextmanager
    async def reaching(self, record: RunRecord) -> AsyncIterator[Transport]:
        """:meth:`transport_for` ``record``, closed on the way out."""
        remote = await self.transport_for(record)
        try:
            yield remote
        finally:
            await remote.close()
