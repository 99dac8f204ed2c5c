"""The cluster health check: the I/O half of ``ddptui check`` (:mod:`ddptui.health` is the
pure half). Both the command line and the console call :func:`check_cluster`."""

from __future__ import annotations

from ddptui.check.report import CheckReport, PortTest
from ddptui.check.run import Progress, check_cluster

__all__ = ["CheckReport", "PortTest", "Progress", "check_cluster"]
