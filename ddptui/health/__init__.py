"""Health: pure functions from every host's facts to findings, with a code, severity and fix.

Nothing here does I/O; the caller connects, probes and measures, then calls :func:`evaluate`.
"""

from __future__ import annotations

from ddptui.health.evaluate import evaluate
from ddptui.health.findings import Code, Finding, HostCheck, Severity
from ddptui.health.gpus import (
    BUSY_MEMORY_MIB,
    is_free,
    procs_per_node,
    resolve_backend,
    selected_gpus,
    usable_gpus,
)
from ddptui.health.network import choose_socket_ifname
from ddptui.health.parity import ParityRow, odd_ones_out, parity_rows

__all__ = [
    "BUSY_MEMORY_MIB",
    "Code",
    "Finding",
    "HostCheck",
    "ParityRow",
    "Severity",
    "choose_socket_ifname",
    "evaluate",
    "is_free",
    "odd_ones_out",
    "parity_rows",
    "procs_per_node",
    "resolve_backend",
    "selected_gpus",
    "usable_gpus",
]
