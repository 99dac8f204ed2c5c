"""``ddptui resume [RUN]``: a new attempt of a stopped or failed run, from its checkpoint."""

from __future__ import annotations

import argparse

from ddptui.commands._runs import (
    detached_hint,
    follow_headless,
    open_run,
    run_detachable,
    say,
)
from ddptui.remote.connection import RemoteCluster
from ddptui.run.launcher import resume
from ddptui.run.store import RunRecord


def run(args: argparse.Namespace) -> int:
    store, record, config = open_run(args.run)

    async def main(started: dict[str, RunRecord]) -> int:
        async with RemoteCluster(
            [config.host(node.host) for node in record.nodes],
            connect_timeout=config.cluster.connect_timeout,
        ) as remote:
            await resume(config, record, store, remote, say=say, debug=args.debug)
        started["run"] = record
        if args.detach:
            say(detached_hint(record))
            return 0
        say(f"run {record.id} resumed (attempt {record.attempt.number}); Ctrl-C detaches")
        return await follow_headless(record, config, store)

    return run_detachable(main)
