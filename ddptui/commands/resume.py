"""``ddptui resume [RUN]``: a new attempt of a stopped or failed run, from its checkpoint."""

from __future__ import annotations

import argparse

from ddptui import STARTED_AT
from ddptui.commands.follow import detached_hint, follow_headless, run_detachable, say
from ddptui.run.control import RunControl
from ddptui.run.following.state import Steps
from ddptui.run.record import RunRecord


def run(args: argparse.Namespace) -> int:
    control = RunControl()

    async def main(started: dict[str, RunRecord]) -> int:
        attachment = await control.resume(
            args.run,
            debug=args.debug,
            say=say,
            steps=Steps.NONE,
            began=STARTED_AT,
            bring_back=tuple(args.bring_back),
        )
        record = attachment.record
        started["run"] = record
        if args.detach:
            await attachment.close()
            say(
                f"run {record.id} resumed (attempt {attachment.judgement.attempt}). "
                f"{detached_hint(record)}"
            )
            return 0
        say(f"run {record.id} resumed (attempt {attachment.judgement.attempt}); Ctrl-C detaches")
        return await follow_headless(attachment)

    return run_detachable(main)
