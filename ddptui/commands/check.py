"""``ddptui check HOSTS [--json] [--bandwidth]``: the cluster health check, as tables or one JSON
document; then, asked, the interconnect measured."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ddptui.check import CheckReport, check_cluster
from ddptui.config import AUTO, Config, HostConfig, load_config
from ddptui.errors import UsageError
from ddptui.health import Finding, HostCheck, parity_rows
from ddptui.health.slurm import SlurmCheck
from ddptui.plan.resources import choose_socket_ifname, is_free, present_gpus, selected_gpus
from ddptui.present import check as words
from ddptui.present.bandwidth import bandwidth_lines
from ddptui.probe.facts import NA, HostFacts, Maybe
from ddptui.run import slurm
from ddptui.run.bandwidth import BandwidthError, measure
from ddptui.untrusted import plain


def run(args: argparse.Namespace) -> int:
    config = load_config(Path(args.hosts), slurm=True)
    errors = Console(stderr=True)
    if config.slurm is not None:
        return _slurm(config, args, errors)
    latest: dict[str, str] = {}
    total = len(config.hosts)

    with errors.status(f"checking {total} hosts…") as status:

        def progress(host: str, event: str) -> None:
            latest[host] = event
            counts = Counter(latest.values())
            summary = ", ".join(f"{count} {event}" for event, count in sorted(counts.items()))
            status.update(f"checking {total} hosts: {summary}")

        report = asyncio.run(check_cluster(config, progress))
    if args.json:
        # allow_nan=False: NaN is not JSON; the probe parser already refuses non-finite facts.
        json.dump(report.to_json(), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        errors.print(words.summary(report))
    else:
        # Piped output has no terminal width to fit; wide enough that no value is cut.
        render(report, Console() if sys.stdout.isatty() else Console(width=160))
    if not args.bandwidth:
        return 0 if report.healthy else 1
    if not report.healthy:
        errors.print("not measuring the interconnect: the check found problems to fix first")
        return 1
    with errors.status(f"measuring the interconnect of {total} hosts…"):
        try:
            measured = asyncio.run(measure(config, report))
        except BandwidthError as error:
            errors.print(Text(f"ddptui check --bandwidth: {error}"))
            return 1
    out = Console(stderr=True) if args.json else Console()
    for line in bandwidth_lines(measured):
        out.print(line, soft_wrap=True)
    return 1 if measured.slow else 0


def _slurm(config: Config, args: argparse.Namespace, errors: Console) -> int:
    if args.bandwidth:
        raise UsageError("--bandwidth measures SSH hosts; a [slurm] cluster has none yet")
    with errors.status("asking Slurm about its nodes…"):
        check = slurm.check(config)
    if args.json:
        json.dump(check.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        errors.print(words.slurm_summary(check))
    else:
        render_slurm(check, Console() if sys.stdout.isatty() else Console(width=160))
    return 0 if check.healthy else 1


def render_slurm(check: SlurmCheck, console: Console) -> None:
    """The human report of a Slurm cluster: findings with fixes, then a summary."""
    _render_findings(check.findings, console)
    _print_wrapped(console, words.slurm_summary(check))


def render(report: CheckReport, console: Console) -> None:
    """The human report: hosts, the version parity grid, findings with fixes, a summary."""
    # Titles printed apart from their tables: a table pads its title with spaces to its width.
    _print_wrapped(console, Text("hosts", style="table.title"))
    console.print(_hosts_table(report))
    probed = [(check.host, check.facts) for check in report.checks if check.facts is not None]
    if probed:
        _print_wrapped(console, Text("version parity (odd values in red)", style="table.title"))
        console.print(_parity_table(probed))
    _render_findings(report.findings, console)
    note = words.port_test_note(report.master_port_test)
    if note is not None:
        _print_wrapped(console, note)
    _print_wrapped(console, words.summary(report))


def _render_findings(findings: Iterable[Finding], console: Console) -> None:
    for group in words.listed(findings):
        _print_wrapped(console, words.finding_line(group))
        fix = words.fix_line(group)
        if fix is not None:
            _print_wrapped(console, fix, indent=words.FIX_INDENT)


def _print_wrapped(console: Console, text: Text, indent: int = 0) -> None:
    """``text`` wrapped to the console under an indent, with no spaces trailing a line."""
    for line in text.wrap(console, max(console.width - indent, 20)):
        line.rstrip()
        console.print(Text(" " * indent) + line, soft_wrap=True)


def _hosts_table(report: CheckReport) -> Table:
    table = Table()
    for column in ("node", "name", "address", "status", "hostname", "python", "torch", "GPUs"):
        table.add_column(column)
    table.add_column("interface")
    head_address = report.config.head.address
    for rank, check in enumerate(report.checks):
        facts = check.facts
        status = words.host_status(check)
        if facts is None:
            table.add_row(*_cells(str(rank), check.host.name, check.host.address, status))
            continue
        table.add_row(
            *_cells(
                str(rank),
                check.host.name,
                check.host.address,
                status,
                _text(facts.hostname),
                _text(facts.python.version),
                _torch(facts),
                _gpus(check.host, facts),
                _interface(check, facts, head_address),
            )
        )
    return table


def _parity_table(probed: list[tuple[HostConfig, HostFacts]]) -> Table:
    rows = parity_rows(probed)
    table = Table()
    table.add_column("")
    hosts = list(rows[0].values) if rows else []
    for host in hosts:
        table.add_column(Text(host))
    for row in rows:
        cells = [
            Text(_text(value), "bold red" if host in row.odd_hosts else "")
            for host, value in row.values.items()
        ]
        table.add_row(Text(row.label), *cells)
    return table


def _cells(*values: str | Text) -> list[Text]:
    """Table cells as Text: rich reads a plain string as markup ("[/]" raises, "[link=…]"
    makes a hyperlink), and the values come from hosts."""
    return [
        value if isinstance(value, Text) else Text(plain(value, one_line=True)) for value in values
    ]


def _text(value: Maybe[object]) -> str:
    """A fact for a cell, one line, its control characters shown as escapes."""
    return "n/a" if value is NA or value is None else plain(str(value), one_line=True)


def _torch(facts: HostFacts) -> str:
    torch = facts.torch
    return _text(torch.version) if torch.status == "ok" else f"{torch.status}"


def _gpus(host: HostConfig, facts: HostFacts) -> str:
    present = present_gpus(facts)
    if not present:
        return "none"
    # Counted as the findings count them: only the GPUs the host's `gpus` key lets a run use.
    selected = selected_gpus(host, facts)
    free = sum(1 for gpu in selected if is_free(gpu))
    counted = f"{free}/{len(selected)} free"
    return counted if len(selected) == len(present) else f"{counted} ({len(present)} present)"


def _interface(check: HostCheck, facts: HostFacts, head_address: str) -> str:
    if check.host.socket_ifname != AUTO:
        return check.host.socket_ifname
    return choose_socket_ifname(facts, head_address) or "?"
