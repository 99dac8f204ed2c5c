"""``ddptui stop [RUN] [--kill]``: checkpoint and stop a run, and make sure nothing is left."""

from __future__ import annotations

import argparse
import asyncio

from ddptui.commands._runs import open_run, say
from ddptui.run.stopper import stop_run


def run(args: argparse.Namespace) -> int:
    store, record, config = open_run(args.run)
    if record.state.final:
        say(f"run {record.id} is already {record.state.value}; making sure nothing is left")
    report = asyncio.run(stop_run(config, record, store, kill=args.kill, say=say))
    for line in report.lines():
        say(line)
    if not report.clean:
        say(f"run {record.id} recorded as stopped, but not everything could be confirmed gone")
        return 1
    if record.state.final:
        say(f"run {record.id} stays {record.state.value}; nothing of it is left running")
        return 0
    say(f"run {record.id} stopped in {report.seconds:.1f} s; nothing of it is left running")
    if record.entry == "trainer" and not args.kill:
        say(f"resume it with `ddptui resume {record.id}`")
    return 0
