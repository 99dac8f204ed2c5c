"""A hosts file's ``[[hosts]]`` before a run: checked over SSH, planned from that check, and
the new run's record made from the plan."""

from __future__ import annotations

from collections.abc import Sequence

from ddptui.check import CheckReport
from ddptui.check.reuse import CheckCache, RecentCheck
from ddptui.check.run import Progress, check_cluster
from ddptui.health import ClusterCheck
from ddptui.health.bandwidth import BandwidthReport
from ddptui.plan.launch import LaunchPlan, PlanError, plan_launch
from ddptui.plan.run_plan import RunPlan
from ddptui.run.backends.cluster import Cluster, NewRun
from ddptui.run.backends.ssh import launcher


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


def _hosts_report(report: ClusterCheck | None) -> CheckReport:
    if not isinstance(report, CheckReport):
        raise PlanError("SSH hosts are planned from their check: check them first")
    return report
