"""``ddptui runs [--json]``: the runs in the run store, newest last."""

from __future__ import annotations

import argparse
import sys
import time

from ddptui.commands.follow import say
from ddptui.present.json_out import write_json
from ddptui.present.runs import COLUMNS, run_document, run_row
from ddptui.run.control import RunControl
from ddptui.untrusted import plain

_WIDTHS = (29, 10, 11, 8, 3, 6, 4, 5, 0)


def run(args: argparse.Namespace) -> int:
    control = RunControl()
    catalogue = control.catalogue()
    now = time.time()
    for run_id, why in catalogue.unreadable.items():
        print(f"ddptui runs: {run_id}: {plain(why, one_line=True)}", file=sys.stderr)
    control.adopt(catalogue.records, say=say)
    if args.json:
        summaries = [run_document(record, now) for record in catalogue.records]
        # ASCII: a host's control or bidi characters (in a detail) travel as \u escapes.
        write_json(summaries, sys.stdout)
        return 0
    if not catalogue.records:
        print("no runs yet: start one with `ddptui launch HOSTS` (or try `ddptui demo`)")
        return 0
    print(_row(tuple(name.upper() for name in COLUMNS)))
    for record in catalogue.records:
        print(_row(tuple(cell.plain for cell in run_row(record, now).cells())))
    return 0


def _row(cells: tuple[str, ...]) -> str:
    return "  ".join(
        cell.ljust(width) if width else cell for cell, width in zip(cells, _WIDTHS, strict=True)
    ).rstrip()
