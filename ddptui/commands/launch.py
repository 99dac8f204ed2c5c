"""``ddptui launch HOSTS``: check, plan, stage and start a run on every host (or submit it as a
Slurm job); then follow it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from ddptui import STARTED_AT
from ddptui.commands.check import checked, render_parts
from ddptui.commands.follow import detached_hint, follow_headless, run_detachable, say
from ddptui.config import Config, load_config
from ddptui.present.check import before_launch, refusal, reused_check
from ddptui.present.plan import dry_run, launch_note, started
from ddptui.run.control import ClusterCheck, RunControl
from ddptui.run.following.state import Steps
from ddptui.run.record import RunRecord


def run(args: argparse.Namespace) -> int:
    config = load_config(Path(args.hosts))
    extra = list(args.passthrough)
    control = RunControl()
    # What is uploaded is known before any host is asked: a cap exceeded fails at once.
    code = control.code(config)

    if not args.dry_run:
        control.warm_up(args.standby)

    async def main(started_run: dict[str, RunRecord]) -> int:
        # SSH hosts are planned from what their check found, so even a dry run checks them
        # first; a batch job's nodes are Slurm's to pick, and its dry run asks nothing.
        report = (
            await _checked_or_recent(control, config, recheck=args.recheck)
            if control.plan_needs_check(config)
            else None
        )
        if report is not None and not cleared(report, force=args.force):
            return 1
        plan = control.plan(config, report, extra_args=extra, debug=args.debug)
        if args.dry_run:
            out, note = dry_run(plan, code)
            sys.stdout.write(out)
            if note is not None:
                say(note)
            return 0
        if report is None:
            report = await checked(control, config)
            if not cleared(report, force=args.force):
                return 1
        note = launch_note(plan)
        if note is not None:
            say(note)
        attachment = await control.launch(
            config, report, plan, say=say, steps=Steps.NONE, queued=args.detach, began=STARTED_AT
        )
        started_run["run"] = attachment.record
        if args.detach:
            await attachment.close()
            record = control.record(attachment.record.id)
            say(f"{started(plan, record)} {detached_hint(record)}")
            print(record.id)
            return 0
        say(f"run {attachment.record.id} is running; Ctrl-C detaches (the run goes on)")
        return await follow_headless(attachment)

    return run_detachable(main)


async def _checked_or_recent(control: RunControl, config: Config, *, recheck: bool) -> ClusterCheck:
    """A recent healthy check of the same hosts, said so, or a new check."""
    recent = None if recheck else control.recent_check(config)
    if recent is None:
        return await checked(control, config)
    say(reused_check(recent))
    return recent.report


def cleared(report: ClusterCheck, *, force: bool = False) -> bool:
    """Whether the check lets a launch go ahead (with ``force``, whatever it found); what it
    found is shown on stderr as :func:`ddptui.present.check.before_launch` says, and a refusal
    says why."""
    refused = not report.healthy and not force
    parts = before_launch(report, refused=refused)
    if parts:
        # Piped, stderr has no width to fit: wide enough that no value of the report is cut.
        render_parts(parts, Console(stderr=True, width=160 if not sys.stderr.isatty() else None))
    if refused:
        say(refusal(report))
    return not refused
