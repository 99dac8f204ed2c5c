"""A launch's words before it starts: the plan as ``ddptui launch --dry-run`` prints it and the
console's launch dialog shows it (:func:`ddptui.plan.describe.describe_plan`, after what is
uploaded), the dialog's head line, and a Slurm run's summary.

Each entry point takes either plan (SSH hosts' :class:`~ddptui.plan.launch.LaunchPlan`, a Slurm
job's :class:`~ddptui.plan.slurm.BatchPlan`) and tells them apart here: the front ends do not."""

from __future__ import annotations

from ddptui.layout import root_code_dir
from ddptui.plan.describe import describe_plan
from ddptui.plan.launch import LaunchPlan
from ddptui.plan.slurm import BatchPlan
from ddptui.run.code.contents import CodeTree
from ddptui.run.record import RunRecord
from ddptui.untrusted import plain


def plan_text(plan: LaunchPlan | BatchPlan, code: CodeTree, *, listed: int = 20) -> str:
    """What is uploaded (its ``listed`` largest files), then each host's directory, environment
    and command, as shell lines; safe to print as it is. A Slurm job's: where the code goes,
    then its batch script."""
    if isinstance(plan, BatchPlan):
        return f"{batch_dry_run(plan, code)}\n\n{plan.script}"
    return describe_plan(plan, code.describe(listed=listed))


def dry_run(plan: LaunchPlan | BatchPlan, code: CodeTree) -> tuple[str, str | None]:
    """What ``ddptui launch --dry-run`` prints: on stdout (the plan's shell lines; a Slurm
    job's batch script alone, ready for sbatch), and the line it says on stderr, if any."""
    if isinstance(plan, BatchPlan):
        return plan.script, batch_dry_run(plan, code)
    return plan_text(plan, code) + "\n", None


def launch_note(plan: LaunchPlan | BatchPlan) -> str | None:
    """The line ``ddptui launch`` says as it hands the run over (a Slurm job's summary); None
    for none."""
    return batch_summary(plan) if isinstance(plan, BatchPlan) else None


def started(plan: LaunchPlan | BatchPlan, record: RunRecord) -> str:
    """What ``ddptui launch --detach`` says of the run it left going (before how to reach it):
    ``run ID started.``, or a Slurm job's id and where its files are."""
    if isinstance(plan, BatchPlan):
        return f"run {plan.run_id}: Slurm job {record.job_id}; its files are in {plan.run_root}."
    return f"run {record.id} started."


def launch_heading(plan: LaunchPlan | BatchPlan) -> str:
    """``2 host(s), 4 ranks, backend nccl, master 192.0.2.2:29500, interface eth0`` (a Slurm
    job's summary)."""
    if isinstance(plan, BatchPlan):
        return batch_summary(plan)
    interfaces = {node.socket_ifname or "default" for node in plan.nodes}
    return (
        f"{len(plan.nodes)} host(s), {plan.world_size} ranks, backend {plan.backend}, "
        f"master {plan.master_addr}:{plan.master_port}, "
        f"interface {plain(', '.join(sorted(interfaces)), one_line=True)}"
    )


def batch_summary(plan: BatchPlan) -> str:
    """``run ID: 2 node(s) × 4 = 8 ranks, backend nccl``."""
    return (
        f"run {plan.run_id}: {plan.nodes} node(s) × {plan.nproc} = {plan.world_size} ranks, "
        f"backend {plan.backend}"
    )


def batch_dry_run(plan: BatchPlan, code: CodeTree) -> str:
    """What a Slurm ``--dry-run`` says after the batch script: the summary, where the ranks run
    from and what is uploaded there."""
    return (
        f"{batch_summary(plan)}; the ranks run from {root_code_dir(plan.run_root)}, where the "
        f"code goes: {code.describe(listed=0)[0]}"
    )
