"""SSH hosts as a kind of cluster: checked over SSH, their runs staged and started by ddptui's
agent, their nodes reached over SSH."""

from __future__ import annotations

from collections.abc import Sequence

from ddptui.config.model import HostConfig
from ddptui.remote.connection import RemoteCluster
from ddptui.remote.target import KEEPALIVE, Keepalive
from ddptui.remote.transport import Transport
from ddptui.run.backends.base import Owner, RunBackend
from ddptui.run.backends.cluster import Cluster
from ddptui.run.backends.kind import Kind
from ddptui.run.backends.ssh.backend import SshBackend
from ddptui.run.backends.ssh.cluster import HostsCluster


class SshKind(Kind):
    """A hosts file's ``[[hosts]]``."""

    def cluster(self) -> Cluster:
        return HostsCluster(self.config)

    def backend(self, owner: Owner) -> RunBackend:
        return SshBackend(self.config, owner, self.transport)

    async def transport(
        self,
        hosts: Sequence[HostConfig],
        job_id: str | None,
        keepalive: Keepalive = KEEPALIVE,
    ) -> Transport:
        """SSH to ``hosts``, with these keepalives (no scheduler: ``job_id`` is None)."""
        return RemoteCluster.for_config(
            self.config,
            hosts,
            keepalive_interval=keepalive.interval_s,
            keepalive_count_max=keepalive.count_max,
        )
