"""``ddptui stop [RUN] [--kill]``: checkpoint and stop a run, and make sure nothing is left."""

from __future__ import annotations

import argparse
import asyncio

from ddptui.commands.follow import say
from ddptui.run.control import RunControl
from ddptui.untrusted import plain


def run(args: argparse.Namespace) -> int:
    control = RunControl()
    record = control.record(args.run)
    reply = asyncio.run(control.stop(record.id, kill=args.kill, say=say))
    lines = reply.data.get("lines")
    for line in lines if isinstance(lines, list) else []:
        say(plain(str(line), one_line=True))
    say(plain(reply.message, one_line=True))
    if not reply.ok:
        return 1
    stopped_now = reply.data.get("was") not in ("completed", "stopped", "failed")
    if stopped_now and record.entry == "trainer" and not args.kill:
        say(f"resume it with `ddptui resume {record.id}`")
    return 0
