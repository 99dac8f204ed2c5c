"""``ddptui status [RUN] [--json]``: a run's state and why, attempts, nodes, ranks and errors."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from ddptui.commands.follow import exit_code, say
from ddptui.present.status import status_lines
from ddptui.run.control import RunControl


def run(args: argparse.Namespace) -> int:
    view = asyncio.run(RunControl().view(args.run, say=say))
    if args.json:
        # ASCII: a host's control or bidi characters travel as \u escapes, never raw.
        json.dump(view.document(), sys.stdout, indent=2, allow_nan=False, ensure_ascii=True)
        sys.stdout.write("\n")
    else:
        print("\n".join(line.plain for line in status_lines(view)))
    return exit_code(view.judgement.state)
