"""A cluster as :class:`~ddptui.run.control.RunControl` asks it before a run, whatever its kind:
a hosts file's SSH hosts (:class:`~ddptui.run.backends.ssh.cluster.HostsCluster`) or a
``[slurm]`` cluster (:class:`~ddptui.run.backends.slurm.cluster.SlurmCluster`). Each checks,
plans and records a new run its own way; what the front ends hold is the same for both (a
:class:`~ddptui.health.ClusterCheck`, a :class:`~ddptui.plan.run_plan.RunPlan`).

The kind is chosen once, by the hosts file (:func:`ddptui.run.backends.kind_of`): nothing above
it (RunControl, the commands, the console) asks which kind a cluster is. Once a run is recorded,
its supervisor's backend (:mod:`ddptui.run.backends.base`) takes over.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from ddptui.check.reuse import CheckCache, RecentCheck
from ddptui.check.run import Progress
from ddptui.config import Config
from ddptui.health import ClusterCheck
from ddptui.health.bandwidth import BandwidthReport
from ddptui.plan.run_plan import RunPlan
from ddptui.run.record import RunRecord


@dataclass(frozen=True)
class NewRun:
    """A run about to be handed to its supervisor."""

    record: RunRecord
    options: tuple[str, ...]
    """The supervisor's options besides ``--launch``."""
    queues: bool
    """Whether the run waits in a queue before it runs (a batch job): a launch that asks to
    return once the run is queued may then return before it runs."""


class Cluster(ABC):
    """One hosts file's cluster, before a run: check it, plan a run, record the run."""

    fixed_hosts: bool
    """Whether the cluster is a list of hosts that ddptui reaches itself (each one checked,
    its key trusted, its links measured); else a scheduler's nodes, known from its check and
    reached through the scheduler."""
    plans_from_check: bool
    """Whether a plan is made from the check's report (what the hosts offer): then even a dry
    run checks first. A batch job's nodes are Slurm's to pick when it runs."""

    def __init__(self, config: Config) -> None:
        self.config = config

    @abstractmethod
    async def check(self, cache: CheckCache, progress: Progress | None = None) -> ClusterCheck:
        """What stands in a run's way (``progress``: each host's steps, where there are hosts);
        kept in ``cache`` where a later launch may stand on it."""

    def recent(self, cache: CheckCache) -> RecentCheck | None:
        """A check from ``cache`` recent enough to stand for a new one (SSH hosts: see
        :mod:`ddptui.check.reuse`); None to check again."""
        return None

    @abstractmethod
    def plan(
        self, report: ClusterCheck | None, *, run_id: str, extra_args: Sequence[str], debug: bool
    ) -> RunPlan:
        """A new run's plan (``report``: the check, where :attr:`plans_from_check`)."""

    @abstractmethod
    def new_run(
        self, report: ClusterCheck, plan: RunPlan, *, demo: bool, began: float | None = None
    ) -> NewRun:
        """The record of the run ``plan`` starts, for its supervisor to launch (``began``: where
        its launch timeline starts; default: its check)."""

    @abstractmethod
    def require_hosts(self, what: str, shown: str | None = None) -> None:
        """Refuse ``what`` (a command, an option, a key) unless the cluster has
        :attr:`fixed_hosts`, saying what does work on it; ``shown``: how to name the hosts
        file (default: its path)."""

    @abstractmethod
    async def measure(self, report: ClusterCheck) -> BandwidthReport:
        """The interconnect as ``report`` found the hosts (``check --bandwidth``)."""
