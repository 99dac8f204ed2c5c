"""``ddptui dump [RUN] [--json]``: every rank's Python stacks, from every host, grouped."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from ddptui.present.stacks import dump_lines
from ddptui.run.control import RunControl


def run(args: argparse.Namespace) -> int:
    taken = asyncio.run(RunControl().dump(args.run))
    if args.json:
        document = {
            "run": taken.run_id,
            "time": taken.taken_at,
            "saved_in": None if taken.saved_in is None else str(taken.saved_in),
            "groups": [
                {
                    "ranks": [stack.rank for stack in group.ranks],
                    "hosts": sorted({stack.host for stack in group.ranks}),
                    "frames": [
                        {"function": f.function, "file": f.file, "line": f.line}
                        for f in group.frames
                    ],
                }
                for group in taken.groups
            ],
            "without_stack": [
                {"rank": s.rank, "host": s.host, "pid": s.pid, "why": s.error}
                for s in taken.stackless
            ],
            "unanswered": list(taken.unanswered),
        }
        json.dump(document, sys.stdout, indent=2, ensure_ascii=True)
        sys.stdout.write("\n")
    else:
        print("\n".join(line.plain for line in dump_lines(taken)))
    return 0 if taken.groups else 1
