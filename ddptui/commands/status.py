"""``ddptui status [RUN] [--json]``: a run's state, attempts, nodes and ranks, asked live."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from typing import Any

from ddptui.commands._runs import exit_code, open_run
from ddptui.run.store import RunRecord, RunState, RunStore
from ddptui.run.watch import RunWatch, finish, snapshot
from ddptui.untrusted import plain


def run(args: argparse.Namespace) -> int:
    store, record, config = open_run(args.run)
    watch = asyncio.run(snapshot(record, config, heartbeats=1 if record.state.final else 2))
    record = _settle(store, record, watch)
    if args.json:
        json.dump(status_json(record, watch), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print("\n".join(status_lines(record, watch)))
    return exit_code(record.state)


def _settle(store: RunStore, record: RunRecord, watch: RunWatch) -> RunRecord:
    """A run whose watcher went away may have ended since: record what the hosts say."""
    if record.state.final:
        return record
    verdict = watch.verdict(stopping=record.state is RunState.STOPPING)
    if verdict is None:
        return record
    finish(store, record.id, verdict)
    return store.load(record.id)


def _number(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def status_json(record: RunRecord, watch: RunWatch) -> dict[str, Any]:
    return {
        "id": record.id,
        "state": record.state.value,
        "demo": record.demo,
        "created": record.created,
        "entry": record.entry,
        "backend": record.backend,
        "world_size": record.world_size,
        "master_addr": record.master_addr,
        "attempts": [
            {
                "number": attempt.number,
                "started": attempt.started,
                "ended": attempt.ended,
                "master_port": attempt.master_port,
                "outcome": attempt.outcome or None,
                "detail": attempt.detail or None,
            }
            for attempt in record.attempts
        ],
        "states": [
            {"state": change.state.value, "time": change.time, "detail": change.detail}
            for change in record.states
        ],
        "nodes": [
            {
                "host": node.host,
                "node_rank": node.node_rank,
                "nproc": node.nproc,
                "run_dir": node.run_dir,
                "alive": watch.nodes[node.host].alive,
                "exit": watch.nodes[node.host].exit,
                "not_answering": watch.nodes[node.host].silent,
                "sample": dict(watch.nodes[node.host].sample),
            }
            for node in record.nodes
        ],
        "ranks": [
            {
                "rank": rank.rank,
                "host": rank.host,
                "node_rank": rank.node_rank,
                "local_rank": rank.local_rank,
                "state": rank.state.value,
                "step": rank.step,
                "loss": _number(rank.loss),
                "samples_per_s": _number(rank.samples_per_s),
                "step_time_s": _number(rank.step_time_s),
                "cuda_peak_mib": _number(rank.cuda_peak_mib),
                "rss_mib": _number(rank.rss_mib),
                "stalled": rank.stalled,
                "straggler": rank.straggler,
            }
            for rank in watch.progress.ranks
        ],
        "progress": watch.progress.format_line(),
        "errors": [
            {
                "category": diagnosis.category.value,
                "message": diagnosis.message,
                "cause": diagnosis.cause,
                "fix": diagnosis.fix,
                "ranks": list(diagnosis.ranks),
                "hosts": list(diagnosis.hosts),
                "count": diagnosis.count,
            }
            for diagnosis in watch.diagnoser.diagnoses()
        ],
    }


def status_lines(record: RunRecord, watch: RunWatch) -> list[str]:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created))
    demo = " (demo)" if record.demo else ""
    lines = [
        f"run {record.id}{demo}: {record.state.value}",
        f"  started {started}; {record.entry}, {record.backend}, world size "
        f"{record.world_size}, master {record.master_addr}",
    ]
    for attempt in record.attempts:
        ended = f", {attempt.outcome}" if attempt.outcome else ", running"
        detail = f": {plain(attempt.detail, one_line=True)}" if attempt.detail else ""
        lines.append(f"  attempt {attempt.number} (port {attempt.master_port}){ended}{detail}")
    for node in record.nodes:
        state = watch.nodes[node.host]
        silence = watch.silence_note(state)
        if silence:
            what = f"not answering ({plain(silence, one_line=True)})"
        elif state.exit is not None:
            what = f"torchrun exited {state.exit}"
        elif state.alive:
            what = "running"
        else:
            what = "no process"
        lines.append(f"  node {node.node_rank} {node.host}: {node.nproc} rank(s), {what}")
    progress = watch.progress.format_line()
    if progress:
        lines.append(f"  {progress}")
    for diagnosis in watch.diagnoser.diagnoses()[:5]:
        lines.append(
            f"  error: {diagnosis.category.value} on rank "
            f"{', '.join(map(str, diagnosis.ranks)) or 'torchrun'}: "
            f"{plain(diagnosis.message, limit=200, one_line=True)}"
        )
        lines.append(f"    fix: {diagnosis.fix}")
    return lines
