"""The cluster health check: the I/O half of ``ddptui check`` (:mod:`ddptui.health` is the
pure half). Both the command line and the console call
:func:`~ddptui.check.run.check_cluster`; what it found, :class:`CheckReport`, is read without
it (and without SSH)."""

from __future__ import annotations

from ddptui.check.report import CheckReport, PortTest

__all__ = ["CheckReport", "PortTest"]
