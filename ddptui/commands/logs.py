"""``ddptui logs [RUN] [--rank N] [--follow] [--errors] [--events]``: a run's output, as plain text.

Lines come from every host through the follower, each file from its first byte, so a reattached
``logs --follow`` prints every line exactly once, whatever happened to the process that
launched the run.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys

from ddptui.commands._runs import open_run
from ddptui.config import Config
from ddptui.run.follow import FileLine, Heartbeat, HostFollower, HostSilent, Update
from ddptui.run.store import RunRecord
from ddptui.run.watch import RunWatch, stop_following
from ddptui.untrusted import plain

_RANK_LOG = re.compile(r"^logs/attempt-(\d+)/.+/(\d+)/(stdout|stderr)\.log$")
_EVENTS = re.compile(r"^events/rank(\d+)\.jsonl$")
_NODE_OUT = re.compile(r"^node/attempt-(\d+)\.out$")


def run(args: argparse.Namespace) -> int:
    _store, record, config = open_run(args.run)
    watch = RunWatch(record)
    try:
        asyncio.run(_follow(record, config, watch, args))
    except KeyboardInterrupt:
        return 0
    if args.errors:
        _print_errors(watch)
    return 0


async def _follow(
    record: RunRecord, config: Config, watch: RunWatch, args: argparse.Namespace
) -> None:
    followers = [
        HostFollower(
            config.host(node.host), node.run_dir, connect_timeout=config.cluster.connect_timeout
        )
        for node in record.nodes
    ]
    queue: asyncio.Queue[Update] = asyncio.Queue(maxsize=10000)
    beats = {node.host: 0 for node in record.nodes}

    async def pump(follower: HostFollower) -> None:
        async for update in follower.updates():
            await queue.put(update)

    tasks = [asyncio.create_task(pump(follower)) for follower in followers]
    try:
        while True:
            update = await queue.get()
            watch.apply(update)
            if isinstance(update, FileLine) and not args.errors:
                _print_line(watch, update, args)
            if queue.empty():
                # Once per burst, not once per line: a write for each of a thousand lines a
                # second was a good part of following's cost.
                sys.stdout.flush()
            if isinstance(update, Heartbeat):
                beats[update.host] += 1
            if isinstance(update, HostSilent):
                sys.stdout.flush()
                print(f"ddptui: {update.host} is not answering", file=sys.stderr, flush=True)
                beats[update.host] = max(beats[update.host], 2)
            if args.follow:
                if watch.verdict() is not None and queue.empty():
                    return
            elif all(count >= 2 for count in beats.values()) and queue.empty():
                return
    finally:
        await stop_following(followers, tasks)


def _print_line(watch: RunWatch, line: FileLine, args: argparse.Namespace) -> None:
    node = watch.nodes[line.host]
    match = _RANK_LOG.match(line.path)
    if match is not None:
        rank = node.base_rank + int(match.group(2))
        label = f"{line.host} rank {rank} {match.group(3)} (attempt {match.group(1)})"
    elif args.events and (match := _EVENTS.match(line.path)) is not None:
        rank = int(match.group(1))
        label = f"{line.host} rank {rank} event"
    elif (match := _NODE_OUT.match(line.path)) is not None and args.rank is None:
        rank = None
        label = f"{line.host} torchrun (attempt {match.group(1)})"
    else:
        return
    if args.rank is not None and rank != args.rank:
        return
    print(f"{label} | {plain(line.text)}")


def _print_errors(watch: RunWatch) -> None:
    diagnoses = watch.diagnoser.diagnoses()
    if not diagnoses:
        print("no errors found in the run's logs")
        return
    for diagnosis in diagnoses:
        ranks = ", ".join(map(str, diagnosis.ranks)) or "torchrun"
        print(
            f"{diagnosis.category.value}: rank {ranks} on {', '.join(diagnosis.hosts)}, "
            f"{diagnosis.count} line(s)"
        )
        print(f"  {plain(diagnosis.message, limit=500, one_line=True)}")
        print(f"  cause: {diagnosis.cause}")
        print(f"  fix: {diagnosis.fix}")
