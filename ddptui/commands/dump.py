"""``ddptui dump [RUN] [--json]``: every rank's Python stacks, from every host, grouped, and
what the ranks' flight recorders say."""

from __future__ import annotations

import argparse
import asyncio
import sys

from ddptui.present.json_out import write_json
from ddptui.present.stacks import dump_lines
from ddptui.run.control import RunControl


def run(args: argparse.Namespace) -> int:
    taken = asyncio.run(RunControl().dump(args.run))
    if args.json:
        write_json(taken.document(), sys.stdout)
    else:
        print("\n".join(line.plain for line in dump_lines(taken)))
    return 0 if taken.groups or taken.flight else 1
