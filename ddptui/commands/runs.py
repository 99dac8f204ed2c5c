"""``ddptui runs [--json]``: the runs in the run store, newest last."""

from __future__ import annotations

import argparse
import json
import sys
import time

from ddptui.run.store import RunRecord, RunStore


def run(args: argparse.Namespace) -> int:
    records = RunStore().records()
    if args.json:
        json.dump([_summary(record) for record in records], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not records:
        print("no runs yet: start one with `ddptui launch HOSTS` (or try `ddptui demo`)")
        return 0
    print(f"{'RUN':<22} {'STATE':<10} {'STARTED':<19} {'TOOK':>8}  {'WORLD':>5}  HOSTS")
    for record in records:
        summary = _summary(record)
        took = summary["duration_s"]
        print(
            f"{record.id:<22} {record.state.value:<10} "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(record.created)):<19} "
            f"{_duration(took):>8}  {record.world_size:>5}  "
            f"{', '.join(node.host for node in record.nodes)}"
            f"{'  (demo)' if record.demo else ''}"
        )
    return 0


def _summary(record: RunRecord) -> dict[str, object]:
    ended = record.states[-1].time if record.state.final and record.states else time.time()
    return {
        "id": record.id,
        "state": record.state.value,
        "demo": record.demo,
        "created": record.created,
        "duration_s": round(ended - record.created, 1),
        "attempts": len(record.attempts),
        "world_size": record.world_size,
        "entry": record.entry,
        "hosts": [node.host for node in record.nodes],
    }


def _duration(seconds: object) -> str:
    if not isinstance(seconds, (int, float)):
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
