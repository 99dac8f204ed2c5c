"""A launch's words before it starts: the plan as ``ddptui launch --dry-run`` prints it and the
console's launch dialog shows it (after what is uploaded), the dialog's head line, and what a
launch says as it hands the run over or leaves it going.

Each entry point takes either plan (SSH hosts' :class:`~ddptui.plan.launch.LaunchPlan`, a Slurm
job's :class:`~ddptui.plan.slurm.BatchPlan`) as a :class:`~ddptui.plan.run_plan.RunPlan`, which
words itself: neither the front ends nor this module ask which kind it is."""

from __future__ import annotations

from ddptui.plan.run_plan import RunPlan
from ddptui.run.code.contents import CodeTree
from ddptui.run.record import RunRecord


def plan_text(plan: RunPlan, code: CodeTree, *, listed: int = 20) -> str:
    """What is uploaded (its ``listed`` largest files), then each host's directory, environment
    and command, as shell lines; safe to print as it is. A Slurm job's: where the code goes,
    then its batch script."""
    return plan.text(code.describe(listed=listed))


def dry_run(plan: RunPlan, code: CodeTree) -> tuple[str, str | None]:
    """What ``ddptui launch --dry-run`` prints: on stdout (the plan's shell lines; a Slurm
    job's batch script alone, ready for sbatch), and the line it says on stderr, if any."""
    return plan.dry_run(code.describe())


def launch_note(plan: RunPlan) -> str | None:
    """The line ``ddptui launch`` says as it hands the run over (a Slurm job's summary); None
    for none."""
    return plan.heading if plan.queues else None


def started(plan: RunPlan, record: RunRecord) -> str:
    """What ``ddptui launch --detach`` says of the run it left going (before how to reach it):
    ``run ID started.``, or a Slurm job's id and where its files are."""
    return plan.started(record.job_id)


def launch_heading(plan: RunPlan) -> str:
    """``2 host(s), 4 ranks, backend nccl, master 192.0.2.2:29500, interface eth0`` (a Slurm
    job's summary)."""
    return plan.heading
