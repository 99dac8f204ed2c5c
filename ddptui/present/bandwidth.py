"""The interconnect's words (``ddptui check --bandwidth``): what it measured with, each size's
time, algbw and busbw as nccl-tests gives them, each pair, and the host whose links are slow."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ddptui.health.bandwidth import BandwidthReport
from ddptui.untrusted import plain

GB = 1e9
"""nccl-tests' GB/s: 10⁹ bytes a second."""


def size_text(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def bandwidth_lines(report: BandwidthReport) -> list[Text]:
    hosts = report.hosts
    lines = [
        Text(
            f"interconnect: {report.backend}, {len(hosts)} hosts, one process each, all-reduce; "
            f"interfaces {', '.join(report.interfaces)}",
            "bold",
        ),
        Text(f"{'size':>9} {'time':>10} {'algbw':>11} {'busbw':>11}"),
    ]
    for row in report.sweep:
        lines.append(
            Text(
                f"{size_text(row.size):>9} {row.seconds * 1e3:>7.2f} ms "
                f"{row.algbw / GB:>6.3f} GB/s {row.busbw / GB:>6.3f} GB/s"
            )
        )
    if report.pairs:
        size = size_text(report.pairs[0].size)
        lines.append(Text(f"pairs, {size} each, every host with its ring neighbour:", "bold"))
        slow = {host.host for host in report.slow}
        for pair in report.pairs:
            odd = pair.first in slow or pair.second in slow
            lines.append(
                Text(
                    f"  {pair.first} ↔ {pair.second}  {pair.algbw / GB:.3f} GB/s",
                    "red" if odd else "",
                )
            )
    for host in report.slow:
        lines.append(
            Text(
                f"slow links: {host.host}: its best pair {host.best / GB:.3f} GB/s, under half the "
                f"hosts' median {host.median / GB:.3f} GB/s. Look at its link speed (`ethtool "
                "IFACE`), cable and switch port, and at what else uses its network",
                "bold red",
            )
        )
    if len(hosts) == 2:
        lines.append(Text("two hosts share one pair: a slow one cannot be told from the other"))
    elif not report.slow:
        lines.append(Text("no host's links are slower than half the others'", "green"))
    return lines


def bandwidth_matrix(report: BandwidthReport) -> Group:
    """The health screen's small form: each measured pair's GB/s in a host × host matrix, the
    slow host in red, and the sweep's largest size in one line."""
    hosts = report.hosts
    slow = {host.host for host in report.slow}
    measured: dict[tuple[str, str], float] = {}
    for pair in report.pairs:
        measured[pair.first, pair.second] = measured[pair.second, pair.first] = pair.algbw / GB
    table = Table(title=f"pairs, GB/s ({report.backend})", title_justify="left", box=None)
    table.add_column("")
    for host in hosts:
        table.add_column(Text(host, "bold red" if host in slow else ""), justify="right")
    for row in hosts:
        cells = [
            Text(f"{measured[row, column]:.3f}" if (row, column) in measured else "·")
            for column in hosts
        ]
        table.add_row(Text(row, "bold red" if row in slow else ""), *cells)
    parts: list[Text | Table] = [table]
    if report.sweep:
        top = report.sweep[-1]
        parts.append(Text(f"all-reduce {size_text(top.size)}: busbw {top.busbw / GB:.3f} GB/s"))
    verdict = bandwidth_lines(report)[-1]
    parts.append(verdict)
    return Group(*parts)


def measuring(hosts: int) -> str:
    """What both front ends say while the benchmark runs."""
    return f"measuring the interconnect of {hosts} hosts…"


def slow_note(report: BandwidthReport) -> str:
    """The measurement's verdict in a notification's few words: the hosts whose links are slow,
    or that none is."""
    slow = ", ".join(plain(host.host, limit=40, one_line=True) for host in report.slow)
    return f"slow links: {slow}" if slow else "no host's links are slow"
