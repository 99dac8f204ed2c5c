"""A launch plan in words: what ``--dry-run`` prints and the console's launch dialog shows."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from ddptui.config.model import AUTO
from ddptui.plan.launch import AUTO_PORT_PLACEHOLDER, LaunchPlan
from ddptui.remote.commands import posix_script
from ddptui.untrusted import plain


def describe_plan(plan: LaunchPlan, upload: Sequence[str] = ()) -> str:
    """What is uploaded (``upload``: lines that say it), then per host the exact directory,
    environment and command that run there, as shell lines a person can paste into a terminal
    on that host or a bug report; safe to print as it is.

    The workdir and the interface names come from the hosts' probes: every line goes through
    the sanitiser on its own, so a control character shows as its escape (that line is then no
    longer the exact command) and a newline cannot start a line of its own, such as another
    node's.
    """
    lines = [
        f"run {plan.run_id}: {len(plan.nodes)} node(s), world size {plan.world_size}, "
        f"backend {plan.backend}, master {plan.master_addr}:{plan.master_port}",
    ]
    if plan.master_port == AUTO:
        lines.append(f"  ({AUTO_PORT_PLACEHOLDER} is a port found free on node 0 at launch)")
    lines += upload
    for node in plan.nodes:
        exports, _, command = posix_script(node.argv, node.env).partition("; ")
        lines += [
            "",
            f"# node {node.node_rank}: {node.host.name} ({node.host.address}), "
            f"{node.nproc} process(es)",
            f"cd {shlex.quote(node.code_dir)}",
            exports,
            command,
        ]
    return "\n".join(plain(line, one_line=True) for line in lines)
