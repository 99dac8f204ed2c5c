"""How the runs layer reaches a node: what it asks of a transport, whichever it is.

Two transports serve it. :class:`~ddptui.remote.connection.RemoteCluster` reaches hosts over
SSH; :class:`~ddptui.remote.srun.SrunCluster` reaches the nodes of a Slurm job through ``srun``
steps from the login node, so a cluster that allows no SSH to its nodes is followed, asked and
signalled the same way. The node agent, the follower, the stopper and the supervisor above are
the same for both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from ddptui.config.model import HostConfig
from ddptui.remote.commands import CommandResult
from ddptui.remote.status import Reachability
from ddptui.remote.stream import LineStream


class Transport(Protocol):
    """Commands on a run's nodes: one at a time (:meth:`run`) or a long-lived stream."""

    def python(self, host: HostConfig, *args: str) -> list[str]:
        """The argv that runs the node's Python with ``args`` where this transport runs it."""
        ...

    async def connect(self, host: HostConfig) -> Reachability:
        """Whether ``host`` can be reached now (and why not); never raises for that."""
        ...

    async def run(
        self,
        host: HostConfig,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float,
        env: Mapping[str, str] | None = None,
        max_stdout: int = ...,
        max_stderr: int = ...,
    ) -> CommandResult:
        """Run ``argv`` on ``host`` and wait for it; see :meth:`RemoteCluster.run`."""
        ...

    async def open_stream(
        self, host: HostConfig, argv: Sequence[str], *, input: str, max_line: int
    ) -> LineStream:
        """Start ``argv`` on ``host`` with ``input`` on its stdin; its stdout as bounded lines.
        Raises :class:`~ddptui.remote.connection.RemoteError` if it cannot be started."""
        ...

    async def read_file(
        self, host: HostConfig, path: str, *, max_bytes: int, timeout: float
    ) -> bytes:
        """``path`` on ``host`` whole, at most ``max_bytes`` of it. Raises
        :class:`~ddptui.remote.files.UnreadableFile`."""
        ...

    async def close(self) -> None:
        """Let go of everything this transport holds."""
        ...
