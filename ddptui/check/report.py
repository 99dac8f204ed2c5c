"""The check's result and its ``ddptui check --json`` form (docs/cli.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ddptui.config.model import Config
from ddptui.health import Finding, HostCheck
from ddptui.health.cluster_check import ClusterCheck, ScheduledNode


@dataclass(frozen=True)
class PortTest:
    """Whether workers tried to connect to node 0's master port, and if not, why not."""

    ran: bool
    why: str = ""
    """Empty when it ran; otherwise the reason it was skipped."""


@dataclass(frozen=True)
class CheckReport(ClusterCheck):
    """Every host's check and the findings over all of them."""

    config: Config
    checks: tuple[HostCheck, ...]
    """In node-rank order: node 0 first."""
    findings: tuple[Finding, ...]
    elapsed_s: float
    master_port_test: PortTest
    began_at: float = 0.0
    """When the check began (Unix seconds): where a launch's timeline starts."""

    @property
    def fixed_hosts(self) -> bool:
        return True

    @property
    def ready(self) -> str | None:
        hosts = len(self.checks)
        return f"{hosts} host{'s' * (hosts != 1)} ready" if self.healthy else None

    @property
    def duration_s(self) -> float:
        return self.elapsed_s

    @property
    def scheduled_nodes(self) -> tuple[ScheduledNode, ...]:
        return ()

    @property
    def usable_nodes(self) -> frozenset[str]:
        return frozenset()

    def to_json(self) -> dict[str, Any]:
        """The ``ddptui check --json`` document (docs/cli.md)."""
        return {
            "healthy": self.healthy,
            "hosts": [
                {
                    "name": check.host.name,
                    "address": check.host.address,
                    "node_rank": rank,
                    "reachable": check.reach.ok,
                    "reach": check.reach.reach.value,
                    "detail": check.reach.detail,
                    "clock_offset_s": check.clock_offset_s,
                    "master_port_reachable": check.master_port_reachable,
                    "probe_failure": None
                    if check.probe_failure is None
                    else dataclasses.asdict(check.probe_failure),
                    "facts": None if check.facts is None else check.facts.to_json(),
                }
                for rank, check in enumerate(self.checks)
            ],
            "findings": [finding.to_json() for finding in self.findings],
            "master_port_test": dataclasses.asdict(self.master_port_test),
            "elapsed_s": round(self.elapsed_s, 3),
        }
