"""``ddptui check HOSTS [--json] [--bandwidth]``: the cluster health check, as tables or one JSON
document; then, asked, the interconnect measured."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from rich.console import Console
from rich.text import Text

from ddptui.config import Config, load_config
from ddptui.present import check as words
from ddptui.present.bandwidth import bandwidth_lines, measuring
from ddptui.present.hosts import HOST_COLUMNS as HOST_COLUMNS
from ddptui.present.json_out import write_json
from ddptui.run.control import BandwidthError, ClusterCheck, RunControl


def run(args: argparse.Namespace) -> int:
    config = load_config(Path(args.hosts))
    control = RunControl()
    if args.bandwidth:
        # Refused before anything is asked: the benchmark runs on hosts ddptui reaches itself.
        control.require_measurable(config, "--bandwidth", args.hosts)
    errors = Console(stderr=True)
    report = asyncio.run(checked(control, config))
    if args.json:
        write_json(report.to_json(), sys.stdout)
        errors.print(words.summary(report))
    else:
        # Piped output has no terminal width to fit; wide enough that no value is cut.
        render(report, Console() if sys.stdout.isatty() else Console(width=160))
    if not args.bandwidth:
        return 0 if report.healthy else 1
    if not report.healthy:
        errors.print("not measuring the interconnect: the check found problems to fix first")
        return 1
    with errors.status(measuring(len(config.hosts))):
        try:
            measured = asyncio.run(control.measure(config, report))
        except BandwidthError as error:
            errors.print(Text(f"ddptui check --bandwidth: {error}"))
            return 1
    out = Console(stderr=True) if args.json else Console()
    for line in bandwidth_lines(measured):
        out.print(line, soft_wrap=True)
    return 1 if measured.slow else 0


async def checked(control: RunControl, config: Config) -> ClusterCheck:
    """The health check, its progress on one line of stderr while it runs (``check``,
    ``launch`` and ``demo`` alike)."""
    errors = Console(stderr=True)
    latest: dict[str, str] = {}
    hosts = control.checked_hosts(config)
    with errors.status(words.checking(latest, hosts)) as status:

        def progress(host: str, event: str) -> None:
            latest[host] = event
            status.update(words.checking(latest, hosts))

        return await control.check(config, progress)


def render(report: ClusterCheck, console: Console) -> None:
    """The human report (:func:`ddptui.present.check.report_parts`): for SSH hosts, the hosts,
    the version parity grid, findings with fixes and a summary; for Slurm, the findings and a
    summary."""
    render_parts(words.report_parts(report), console)


def render_parts(parts: list[words.Part], console: Console) -> None:
    for part in parts:
        if isinstance(part.content, Text):
            _print_wrapped(console, part.content, part.indent)
        else:
            console.print(part.content)


def _print_wrapped(console: Console, text: Text, indent: int = 0) -> None:
    """``text`` wrapped to the console under an indent, with no spaces trailing a line."""
    for line in text.wrap(console, max(console.width - indent, 20)):
        line.rstrip()
        console.print(Text(" " * indent) + line, soft_wrap=True)
