"""``ddptui launch HOSTS``: check, plan, stage and start a run on every host; then follow it."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from rich.console import Console

from ddptui.check import CheckReport
from ddptui.commands.follow import detached_hint, follow_headless, run_detachable, say
from ddptui.config import Config, load_config
from ddptui.health import Severity
from ddptui.plan.describe import describe_plan
from ddptui.run import layout
from ddptui.run.control import RunControl
from ddptui.run.state import Steps
from ddptui.run.store import RunRecord


def run(args: argparse.Namespace) -> int:
    config = load_config(Path(args.hosts), slurm=True)
    extra = list(args.passthrough)
    control = RunControl()
    if config.slurm is not None:
        return _slurm(control, config, args, extra)

    # What is uploaded is known before any host is asked: a cap exceeded fails at once.
    code = control.code(config)

    async def main(started: dict[str, RunRecord]) -> int:
        report = await checked(control, config)
        if not report.healthy and not args.force:
            return refuse(report)
        plan = control.plan(config, report, extra_args=extra, debug=args.debug)
        if args.dry_run:
            print(describe_plan(plan, code.describe()))
            return 0
        attachment = await control.launch(config, report, plan, say=say, steps=Steps.NONE)
        started["run"] = attachment.record
        if args.detach:
            await attachment.close()
            say(f"run {attachment.record.id} started. {detached_hint(attachment.record)}")
            print(attachment.record.id)
            return 0
        say(f"run {attachment.record.id} is running; Ctrl-C detaches (the run goes on)")
        return await follow_headless(attachment)

    return run_detachable(main)


async def checked(control: RunControl, config: Config) -> CheckReport:
    """The health check, with the same one-line progress as ``ddptui check``."""
    errors = Console(stderr=True)
    latest: dict[str, str] = {}
    total = len(config.hosts)
    with errors.status(f"checking {total} hosts…") as status:

        def progress(host: str, event: str) -> None:
            latest[host] = event
            counts = Counter(latest.values())
            summary = ", ".join(f"{count} {what}" for what, count in sorted(counts.items()))
            status.update(f"checking {total} hosts: {summary}")

        return await control.check(config, progress)


def refuse(report: CheckReport) -> int:
    from ddptui.commands.check import render

    render(report, _report_console())
    errors = sum(finding.severity is Severity.ERROR for finding in report.findings)
    say(
        f"not launching: the check found {errors} error(s) (above). Fix them, or launch "
        "anyway with --force"
    )
    return 1


def _slurm(control: RunControl, config: Config, args: argparse.Namespace, extra: list[str]) -> int:
    plan = control.plan_batch(config, extra_args=extra, debug=args.debug)
    code = control.code(config)
    summary = (
        f"run {plan.run_id}: {plan.nodes} node(s) × {plan.nproc} = {plan.world_size} ranks, "
        f"backend {plan.backend}"
    )
    if args.dry_run:
        sys.stdout.write(plan.script)
        say(
            f"{summary}; the ranks run from {layout.root_code_dir(plan.run_root)}, where the "
            f"code goes: {code.describe(listed=0)[0]}"
        )
        return 0
    check = control.check_slurm(config)
    if check.findings:
        from ddptui.commands.check import render_slurm

        render_slurm(check, _report_console())
    if not check.healthy and not args.force:
        say(
            "not launching: the check found errors (above). Fix them, or launch anyway with --force"
        )
        return 1
    say(summary)

    async def main(started: dict[str, RunRecord]) -> int:
        attachment = await control.launch_slurm(
            config, plan, extra, say=say, steps=Steps.NONE, queued=args.detach
        )
        started["run"] = attachment.record
        if args.detach:
            await attachment.close()
            record = control.store.load(plan.run_id)
            say(
                f"run {plan.run_id}: Slurm job {record.job_id}; its files are in {plan.run_root}. "
                f"{detached_hint(record)}"
            )
            print(plan.run_id)
            return 0
        say(f"run {plan.run_id} is running; Ctrl-C detaches (the run goes on)")
        return await follow_headless(attachment)

    return run_detachable(main)


def _report_console() -> Console:
    # Piped, stderr has no width to fit: wide enough that no value of the report is cut.
    return Console(stderr=True, width=160 if not sys.stderr.isatty() else None)
