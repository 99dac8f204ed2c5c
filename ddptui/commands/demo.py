"""``ddptui demo [--nodes N] [--procs P] [--spare] [--headless]``: the whole product on this
machine.

N loopback SSH hosts served in-process (:mod:`ddptui.demo`), then the path every cluster takes:
the check, the launch of the bundled trainer, the console (or, ``--headless``, following the
run to its end). ``--spare`` serves one more host, a spare, with recovery on, and gives the
console's run screen a key that kills a node's ranks, for recovery to heal. When the demo ends,
however it ends, the run is killed if it still goes on, the hosts stop, and their directories
are removed: nothing of it outlives the command.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ddptui.commands.check import checked
from ddptui.commands.follow import follow_headless, say
from ddptui.commands.launch import cleared
from ddptui.config import Config, load_config
from ddptui.demo.cluster import SPARE, STEPS, DemoCluster, demo_cluster
from ddptui.demo.faults import kill_ranks
from ddptui.errors import UsageError
from ddptui.run.control import RunControl
from ddptui.run.following.state import Steps
from ddptui.run.record import RunRecord

_ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("torch") is None:
        # The demo's hosts are this machine: the trainer runs on its Python.
        raise UsageError(
            "the demo trains on this machine, and its Python has no torch: install it with "
            "`pip install torch==2.13.0` (the CPU build) or `pip install 'ddptui[demo]'`"
        )
    installed = importlib.util.find_spec("ddptui.ui.app") is not None
    terminal = sys.stdin.isatty() and sys.stdout.isatty()
    console = not args.headless and installed and terminal
    if not args.headless and not console:
        missing = "the console is not installed here" if not installed else "no terminal here"
        say(f"{missing}; following the demo headless")
    control = RunControl()
    with _terminate_as_interrupt():
        spare = f", and a spare ({SPARE}) with recovery on" if args.spare else ""
        say(
            f"starting {args.nodes} demo host(s) on 127.0.0.1 ({args.procs} process(es) "
            f"each){spare}"
        )
        steps = STEPS if args.steps is None else args.steps
        with demo_cluster(args.nodes, args.procs, steps, spare=args.spare) as cluster:
            config = load_config(cluster.hosts_file)
            try:
                if console:
                    return _console(cluster, config)
                return asyncio.run(_headless(control, config))
            finally:
                _wind_down(control, config)


async def _headless(control: RunControl, config: Config) -> int:
    """``ddptui launch HOSTS --headless``'s path on the demo's hosts."""
    report = await checked(control, config)
    if not cleared(report):
        return 1
    plan = control.plan(config, report)
    attachment = await control.launch(config, report, plan, demo=True, say=say, steps=Steps.NONE)
    say(f"run {attachment.record.id} is running; Ctrl-C ends the demo (and the run)")
    return await follow_headless(attachment)


def _console(cluster: DemoCluster, config: Config) -> int:
    from ddptui.ui.app import run_console

    hosts = f"demo: {len(config.ordered_hosts)} hosts"
    served = "on 127.0.0.1, served by this process"
    if config.recovery.on:
        note = f"{hosts} and a spare ({SPARE}) {served}, recovery on: x on a run kills a node"
    else:
        note = f"{hosts} {served}"
    return run_console(
        config.path,
        demo_note=f"{note}; q ends them and their runs",
        demo_kill=node_killer(cluster, config) if config.recovery.on else None,
    )


def node_killer(cluster: DemoCluster, config: Config) -> Callable[[RunRecord], str]:
    """The run screen's key in ``--spare``'s demo: kill the ranks of a run's last node, and say
    what follows.

    Never node 0's: it holds the checkpoints, and recovery gives a run up when it is at fault.
    """

    def kill(record: RunRecord) -> str:
        node = max(record.nodes, key=lambda node: node.node_rank)
        if node.node_rank == 0:
            return (
                "demo: this run's one node is node 0, which holds the checkpoints and which "
                "recovery cannot replace: nothing killed (--nodes 2 or more has a node to kill)"
            )
        ranks = f"node {node.node_rank}'s ranks ({node.host})"
        if not kill_ranks(cluster.root, node.run_dir):
            return f"demo: none of {ranks} is running: nothing killed"
        return f"demo: killed {ranks}: {_what_follows(config, record)}"

    return kill


def _what_follows(config: Config, record: RunRecord) -> str:
    if not record.spares_left(spare.name for spare in config.spares):
        return "no spare is left to take its place, so the run fails; r resumes it"
    return "watch the run heal"


def _wind_down(control: RunControl, config: Config) -> None:
    """Kill what still runs on the demo's hosts, and end the runs' supervisors, before the
    hosts and their files go.

    Every run launched on them counts, from the store by hosts file: a Ctrl-C during the
    launch leaves a run that was never handed back.
    """
    runs = [
        record for record in control.catalogue().records if record.hosts_file == str(config.path)
    ]
    # A second Ctrl-C must not cut this short: it would leave torchrun running.
    previous = {number: signal.signal(number, signal.SIG_IGN) for number in _ENDING_SIGNALS}
    try:
        for record in runs:
            if not record.state.final:
                _tell(f"demo ending: killing run {record.id}")
                reply = asyncio.run(control.stop(record.id, kill=True, say=_tell))
                if not reply.ok:
                    _tell(reply.message)
            # Its supervisor goes with the hosts it followed, not some seconds later.
            asyncio.run(control.release(record.id))
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _tell(line: str) -> None:
    """:func:`say`, for as long as there is someone to tell: a closed terminal (the SIGHUP
    that ends the demo) must not cut the winding down short."""
    with contextlib.suppress(OSError):
        say(line)


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal) end the demo as Ctrl-C does, cleaning up."""
    previous = {
        number: signal.signal(number, signal.default_int_handler)
        for number in _ENDING_SIGNALS
        if number != signal.SIGINT
    }
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
