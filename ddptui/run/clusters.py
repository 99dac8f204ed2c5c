"""The two kinds of cluster a run goes to, as :class:`~ddptui.run.control.RunControl` asks
them before a run: a hosts file's SSH hosts (:class:`HostsCluster`) and a ``[slurm]`` cluster
(:class:`SlurmCluster`). Each checks, plans and records a new run its own way; what the front
ends hold is the same for both (a :class:`~ddptui.health.ClusterCheck`, a :data:`RunPlan`).

:func:`cluster_of` is where the kind is chosen, once, by the hosts file: nothing above it
(RunControl, the commands, the console) asks which kind a cluster is. Once a run is recorded,
its supervisor's backend (:mod:`ddptui.run.backends`) takes over.
"""

from __future__ import annotations

import asyncio
import shlex
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn, TypeAlias

from ddptui.check import CheckReport, check_cluster
from ddptui.check.reuse import CheckCache, RecentCheck
from ddptui.check.run import Progress
from ddptui.config import Config
from ddptui.errors import UsageError
from ddptui.health import ClusterCheck
from ddptui.health.bandwidth import BandwidthReport
from ddptui.plan.launch import LaunchPlan, PlanError, plan_launch
from ddptui.plan.slurm import BatchPlan, plan_batch
from ddptui.run import launcher, slurm, slurm_run
from ddptui.run.record import RunRecord

RunPlan: TypeAlias = LaunchPlan | BatchPlan
"""A new run's plan: every host's torchrun (SSH hosts), or the batch job Slurm places."""


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


class HostsCluster(Cluster):
    """A hosts file's ``[[hosts]]``, reached over SSH."""

    fixed_hosts = True
    plans_from_check = True

    def require_hosts(self, what: str, shown: str | None = None) -> None:
        del what, shown  # the hosts are there for anything

    async def check(self, cache: CheckCache, progress: Progress | None = None) -> ClusterCheck:
        report = await check_cluster(self.config, progress)
        cache.keep(report)
        return report

    def recent(self, cache: CheckCache) -> RecentCheck | None:
        return cache.recent(self.config)

    def plan(
        self, report: ClusterCheck | None, *, run_id: str, extra_args: Sequence[str], debug: bool
    ) -> RunPlan:
        return plan_launch(
            self.config,
            _hosts_report(report).checks,
            run_id=run_id,
            extra_args=extra_args,
            debug=debug,
        )

    def new_run(
        self, report: ClusterCheck, plan: RunPlan, *, demo: bool, began: float | None = None
    ) -> NewRun:
        if not isinstance(plan, LaunchPlan):
            raise PlanError(f"{self.config.path}: a batch job's plan for SSH hosts")
        record = launcher.new_record(
            self.config, _hosts_report(report), plan, demo=demo, began=began
        )
        return NewRun(record, (), queues=False)

    async def measure(self, report: ClusterCheck) -> BandwidthReport:
        from ddptui.run.bandwidth import measure

        return await measure(self.config, _hosts_report(report))


class SlurmCluster(Cluster):
    """A ``[slurm]`` cluster: Slurm picks its nodes for each job, which share the workdir."""

    fixed_hosts = False
    plans_from_check = False

    def require_hosts(self, what: str, shown: str | None = None) -> NoReturn:
        named = str(self.config.path) if shown is None else shown
        raise UsageError(
            f"{named}: a [slurm] cluster, whose nodes Slurm gives each job: ddptui checks them, "
            f"and launches, follows, stops and resumes its runs (`ddptui check|launch "
            f"{shlex.quote(named)}`, or the console: `ddptui {shlex.quote(named)}`); {what} "
            "needs [[hosts]]"
        )

    async def check(self, cache: CheckCache, progress: Progress | None = None) -> ClusterCheck:
        # Asking Slurm costs no login on any node: nothing is kept. sinfo and scontrol block:
        # a thread, so that the console's loop goes on meanwhile.
        return await asyncio.to_thread(slurm.check, self.config)

    def plan(
        self, report: ClusterCheck | None, *, run_id: str, extra_args: Sequence[str], debug: bool
    ) -> RunPlan:
        """The batch script, its workdir as the head sees it: the nodes share it."""
        assert self.config.node is not None
        workdir = slurm_run.workdir(self.config)
        if not workdir.startswith("/"):
            raise UsageError(
                f"{self.config.path}: [cluster] workdir {self.config.node.workdir!r}: a Slurm "
                "run's workdir is shared by the login node and the nodes; give an absolute path "
                "or one starting with ~/"
            )
        return plan_batch(
            self.config, run_id=run_id, workdir=workdir, extra_args=extra_args, debug=debug
        )

    def new_run(
        self, report: ClusterCheck, plan: RunPlan, *, demo: bool, began: float | None = None
    ) -> NewRun:
        if not isinstance(plan, BatchPlan):
            raise PlanError(f"{self.config.path}: an SSH launch plan for a [slurm] cluster")
        record = slurm_run.new_record(self.config, plan, plan.extra_args)
        return NewRun(record, ("--debug",) if plan.debug else (), queues=True)

    async def measure(self, report: ClusterCheck) -> BandwidthReport:
        self.require_hosts("measuring the interconnect")


def cluster_of(config: Config) -> Cluster:
    """``config``'s cluster: a ``[slurm]`` one when the hosts file has that table, else its
    SSH hosts."""
    if config.slurm is not None:
        return SlurmCluster(config)
    return HostsCluster(config)


def _hosts_report(report: ClusterCheck | None) -> CheckReport:
    if not isinstance(report, CheckReport):
        raise PlanError("SSH hosts are planned from their check: check them first")
    return report
