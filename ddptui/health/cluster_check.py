"""What every cluster's check is, whatever asked the cluster: an SSH check of its hosts
(:class:`~ddptui.check.CheckReport`) or Slurm's word on its nodes
(:class:`~ddptui.health.slurm.SlurmCheck`).

Front ends hold a :class:`ClusterCheck` and ask it only this much; :mod:`ddptui.present`
renders either kind through it, so that neither branches on the kind of cluster.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol

from ddptui.health.findings import Finding, Severity


class ScheduledNode(Protocol):
    """One of a scheduler's nodes as a check lists it (a Slurm partition's:
    :class:`~ddptui.health.slurm.SlurmNode`)."""

    @property
    def name(self) -> str: ...

    @property
    def partition(self) -> str: ...

    @property
    def state(self) -> str:
        """As the scheduler says it (``idle``, ``drained``…)."""

    @property
    def reason(self) -> str | None:
        """Why the scheduler set that state, in an administrator's words."""

    @property
    def gpus(self) -> int | None:
        """The GPUs the scheduler schedules on it; None when it has none."""

    @property
    def usable(self) -> bool:
        """Whether the scheduler would give it to a new job (busy nodes count: they free
        up)."""


class ClusterCheck(ABC):
    """A cluster's check: its findings, whether it is fit to launch on, what of the cluster a
    run may use, its ``--json`` document."""

    findings: tuple[Finding, ...]
    """Errors first, then warnings, then information."""

    @property
    def healthy(self) -> bool:
        """No finding of severity error."""
        return not any(finding.severity is Severity.ERROR for finding in self.findings)

    @property
    @abstractmethod
    def fixed_hosts(self) -> bool:
        """Whether the check is of hosts that ddptui reaches itself, a row of the report each
        (its errors then count one per host and problem); else of a scheduler's nodes
        (:attr:`scheduled_nodes`), whose findings name nodes and the partition, a few lines."""

    @property
    @abstractmethod
    def ready(self) -> str | None:
        """What of the cluster a run may use, as the check's summary words it: ``3 hosts
        ready``, ``partition debug, 3 of 4 nodes usable``; None when there is nothing to say
        beside the errors (hosts are ready only all together)."""

    @property
    @abstractmethod
    def duration_s(self) -> float | None:
        """How long the check took, where its summary says so."""

    @property
    @abstractmethod
    def scheduled_nodes(self) -> tuple[ScheduledNode, ...]:
        """The scheduler's nodes the check listed; none for hosts that ddptui reaches
        itself."""

    @property
    @abstractmethod
    def usable_nodes(self) -> frozenset[str]:
        """The names of the :attr:`scheduled_nodes` a run may get: usable, and not kept off by
        the hosts file."""

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """The ``ddptui check --json`` document (docs/cli.md)."""
