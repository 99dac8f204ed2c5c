"""A ``[slurm]`` cluster before a run: Slurm asked about its nodes, the batch job planned with
no check (Slurm picks the nodes when the job runs), and the new run's record, with no nodes
yet."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Sequence
from typing import NoReturn

from ddptui.check.reuse import CheckCache
from ddptui.check.run import Progress
from ddptui.errors import UsageError
from ddptui.health import ClusterCheck
from ddptui.health.bandwidth import BandwidthReport
from ddptui.plan.launch import PlanError
from ddptui.plan.run_plan import RunPlan
from ddptui.plan.slurm import BatchPlan, plan_batch
from ddptui.run.backends.cluster import Cluster, NewRun
from ddptui.run.backends.slurm import attempt as slurm_attempt
from ddptui.run.backends.slurm import commands


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
        return await asyncio.to_thread(commands.check, self.config)

    def plan(
        self, report: ClusterCheck | None, *, run_id: str, extra_args: Sequence[str], debug: bool
    ) -> RunPlan:
        """The batch script, its workdir as the head sees it: the nodes share it."""
        assert self.config.node is not None
        workdir = slurm_attempt.workdir(self.config)
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
        record = slurm_attempt.new_record(self.config, plan, plan.extra_args)
        return NewRun(record, ("--debug",) if plan.debug else (), queues=True)

    async def measure(self, report: ClusterCheck) -> BandwidthReport:
        self.require_hosts("measuring the interconnect")
