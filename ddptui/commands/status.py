"""``ddptui status [RUN] [--json]``: a run's state and why, attempts, nodes, ranks and errors."""

from __future__ import annotations

import argparse
import asyncio
import sys

from ddptui.commands.follow import exit_code, say
from ddptui.present.json_out import write_json
from ddptui.present.status import status_lines
from ddptui.run.control import RunControl


def run(args: argparse.Namespace) -> int:
    view = asyncio.run(RunControl().view(args.run, say=say))
    if args.json:
        # ASCII: a host's control or bidi characters travel as \u escapes, never raw.
        write_json(view.document(), sys.stdout)
    else:
        print("\n".join(line.plain for line in status_lines(view)))
    return exit_code(view.judgement.state)
