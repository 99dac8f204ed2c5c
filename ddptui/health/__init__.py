"""Health: pure functions from every host's facts to findings, with a code, severity and fix.

Nothing here does I/O; the caller connects, probes and measures, then calls :func:`evaluate`.
"""

from __future__ import annotations

from ddptui.health.cluster_check import ClusterCheck, ScheduledNode
from ddptui.health.evaluate import evaluate
from ddptui.health.findings import Code, Finding, HostCheck, ProbeFailure, Severity
from ddptui.health.parity import ParityRow, odd_ones_out, parity_rows

__all__ = [
    "ClusterCheck",
    "Code",
    "Finding",
    "HostCheck",
    "ParityRow",
    "ProbeFailure",
    "ScheduledNode",
    "Severity",
    "evaluate",
    "odd_ones_out",
    "parity_rows",
]
