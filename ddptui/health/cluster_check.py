"""What every cluster's check is, whatever asked the cluster: an SSH check of its hosts
(:class:`~ddptui.check.CheckReport`) or Slurm's word on its nodes
(:class:`~ddptui.health.slurm.SlurmCheck`).

Front ends hold a :class:`ClusterCheck` and ask it only this much; :mod:`ddptui.present`
renders either kind, so that no front end branches on the kind of cluster.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ddptui.health.findings import Finding, Severity


class ClusterCheck(ABC):
    """A cluster's check: its findings, whether it is fit to launch on, its ``--json``
    document."""

    findings: tuple[Finding, ...]
    """Errors first, then warnings, then information."""

    @property
    def healthy(self) -> bool:
        """No finding of severity error."""
        return not any(finding.severity is Severity.ERROR for finding in self.findings)

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """The ``ddptui check --json`` document (docs/architecture.md)."""
