"""The check report's words: findings with their fixes, the master-port note, the summary, a
host's findings, as ``ddptui check`` prints them and the health screen shows them (the hosts'
rows, statuses and GPUs are :mod:`ddptui.present.hosts`).

Every entry point takes a :class:`~ddptui.health.ClusterCheck`, whichever kind of cluster was
checked (SSH hosts' :class:`~ddptui.check.CheckReport`, Slurm's
:class:`~ddptui.health.slurm.SlurmCheck`), and words it through what every check says of
itself; only the hosts' own tables and master-port note ask for a check of hosts."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from ddptui.check import CheckReport, PortTest
from ddptui.check.reuse import RecentCheck
from ddptui.health import ClusterCheck, Code, Finding, Severity
from ddptui.health.groups import FindingGroup, group_findings
from ddptui.present.hosts import check_progress, hosts_table, parity_table
from ddptui.untrusted import plain

FIX_INDENT = 4
"""How many columns a fix sits to the right of its finding."""

_SEVERITY = {
    Severity.ERROR: ("✗", "bold red"),
    Severity.WARNING: ("!", "yellow"),
    Severity.INFO: ("i", "cyan"),
}
# Both front ends' hosts tables have an interface column; JSON keeps these for scripts.
_SHOWN_IN_TABLES = frozenset({Code.SOCKET_IFNAME_CHOSEN})


def listed(findings: Iterable[Finding]) -> list[FindingGroup]:
    """``findings`` as a report lists them: grouped, errors first, then warnings, then
    information, without those the hosts table already shows."""
    kept = [finding for finding in findings if finding.code not in _SHOWN_IN_TABLES]
    return [
        group
        for severity in Severity
        for group in group_findings(finding for finding in kept if finding.severity is severity)
    ]


def finding_line(group: FindingGroup) -> Text:
    """``✗ gpu-a and gpu-b: message  [code]``: the severity's mark, the hosts (none for a
    cluster-wide finding), the message through the sanitiser and the finding's code.

    A message of several lines (a probe's stderr) goes on below, each line indented and
    marked: what a host printed cannot pass for a line of the report."""
    where = f"{group.where}: " if group.hosts else ""
    first, *more = plain(group.message).split("\n")
    line = Text.assemble(_mark(group.severity), (where, "bold"), first)
    line.append(f"  [{group.code.value}]", style="dim")
    for text in more:
        line.append("\n" + " " * FIX_INDENT + "│ ", style="dim")
        line.append(text)
    return line


def fix_line(group: FindingGroup) -> Text | None:
    """``fix: …``, or ``fix (as on gpu-a): …`` when the hosts' fixes differ in more than their
    names; None for a finding without a fix. Not indented: see :data:`FIX_INDENT`."""
    if not group.hint:
        return None
    fix = "fix: " if group.hint_host is None else f"fix (as on {group.hint_host}): "
    return Text(fix + plain(group.hint), style="dim")


def entries(findings: Iterable[Finding]) -> list[tuple[Text, Text | None]]:
    """Each finding as the report lists it (:func:`listed`): its line and its fix (None without
    one), the fix to be indented by :data:`FIX_INDENT`."""
    return [(finding_line(group), fix_line(group)) for group in listed(findings)]


def findings_text(report: ClusterCheck, host: str) -> Text:
    """The health screen's findings for ``host``: the report's entries that name it (``none``
    in green without one), then the cluster-wide ones and the master-port note.

    The report's own groups: a finding several hosts share reads as ``ddptui check`` says it."""
    text = Text(f"findings for {plain(host, one_line=True)}\n", "bold")
    groups = listed(report.findings)
    mine = [group for group in groups if host in group.hosts]
    if not mine:
        text.append("none\n", "green")
    text.append_text(_entries_text(mine))
    shared = _entries_text([group for group in groups if not group.hosts])
    note = port_test_note(report.master_port_test) if isinstance(report, CheckReport) else None
    if note is not None:
        shared.append_text(note + "\n")
    if shared:
        text.append("\ncluster-wide\n", "bold")
        text.append_text(shared)
    return text


def error_count(report: ClusterCheck) -> int:
    """How many errors the check found, one per host and problem (as ``--json`` lists them)."""
    return sum(finding.severity is Severity.ERROR for finding in report.findings)


def _entries_text(groups: list[FindingGroup]) -> Text:
    text = Text()
    for group in groups:
        text.append_text(finding_line(group) + "\n")
        fix = fix_line(group)
        if fix is not None:
            text.append_text(Text(" " * FIX_INDENT) + fix + "\n")
    return text


def port_test_note(test: PortTest) -> Text | None:
    """Why the master port test did not run, as an information line; None when it ran."""
    if test.ran:
        return None
    return Text.assemble(_mark(Severity.INFO), f"master port test skipped: {test.why}")


def summary(report: ClusterCheck) -> Text:
    """The report's last line, in green when it is healthy, else in red: for SSH hosts
    ``healthy: 3 hosts ready, 1 warning (2.1 s)`` or ``not healthy: 2 errors, 1 warning
    (2.1 s)``, counted as the report lists them, one for a line that several hosts share; for
    Slurm ``healthy: partition debug, 3 of 4 nodes usable, 1 warning``."""
    counts = Counter(group.severity for group in listed(report.findings))
    problems = [
        _count(counts[severity], severity.value)
        for severity in (Severity.ERROR, Severity.WARNING)
        if counts[severity]
    ]
    ready = [] if report.ready is None else [report.ready]
    took = "" if report.duration_s is None else f" ({report.duration_s:.1f} s)"
    if report.healthy:
        return Text(f"healthy: {', '.join([*ready, *problems])}{took}", style="bold green")
    return Text(f"not healthy: {', '.join([*problems, *ready])}{took}", style="bold red")


def reused_check(recent: RecentCheck, now: float | None = None) -> str:
    """What a launch that stands on a kept check says instead of checking:
    ``the check of 2 min ago stands (3 hosts healthy; same hosts file; no run started since is
    running); --recheck checks again``."""
    age = max(0.0, (time.time() if now is None else now) - recent.checked_at)
    ago = f"{age:.0f} s" if age < 60 else f"{age // 60:.0f} min"
    hosts = _count(len(recent.report.checks), "host")
    return (
        f"the check of {ago} ago stands ({hosts} healthy; same hosts file; no run started "
        "since is running); --recheck checks again"
    )


def _mark(severity: Severity) -> Text:
    symbol, style = _SEVERITY[severity]
    return Text(f"{symbol} ", style)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number != 1)}"


@dataclass(frozen=True)
class Part:
    """One piece of a printed report: words, wrapped to the width under ``indent``, or a
    table."""

    content: Text | Table
    indent: int = 0


def report_parts(report: ClusterCheck) -> list[Part]:
    """The human report, as ``ddptui check`` prints it: for SSH hosts, the hosts table, the
    version parity grid, the findings with their fixes, the master-port note and the summary;
    for Slurm, the findings and the summary."""
    # Titles apart from their tables: a table pads its title with spaces to its width.
    parts: list[Part] = []
    if isinstance(report, CheckReport):
        parts += [Part(Text("hosts", style="table.title")), Part(hosts_table(report))]
        parity = parity_table(report)
        if parity is not None:
            parts.append(Part(Text("version parity (odd values in red)", style="table.title")))
            parts.append(Part(parity))
    for line, fix in entries(report.findings):
        parts.append(Part(line))
        if fix is not None:
            parts.append(Part(fix, FIX_INDENT))
    if isinstance(report, CheckReport):
        note = port_test_note(report.master_port_test)
        if note is not None:
            parts.append(Part(note))
    parts.append(Part(summary(report)))
    return parts


def before_launch(report: ClusterCheck, *, refused: bool) -> list[Part]:
    """What ``ddptui launch`` shows of its check: the whole report when it refuses to launch;
    a scheduler's findings and summary whenever it has findings, a few lines that say why a
    queued job may wait; nothing else of hosts that ddptui reaches itself (the run's own lines
    follow)."""
    shown = refused or (bool(report.findings) and not report.fixed_hosts)
    return report_parts(report) if shown else []


def refusal(report: ClusterCheck) -> str:
    """Why ``ddptui launch`` does not launch, after :func:`before_launch`."""
    # A scheduler's findings name nodes and its partition, not the hosts a count would be of.
    found = f"{error_count(report)} error(s)" if report.fixed_hosts else "errors"
    return (
        f"not launching: the check found {found} (above). Fix them, or launch anyway with --force"
    )


def checking(latest: Mapping[str, str], hosts: int | None) -> str:
    """The check's progress in one line while it runs: each of ``hosts`` hosts' latest step
    (:func:`ddptui.present.hosts.check_progress`), or, with no hosts of its own to reach
    (:meth:`~ddptui.run.control.RunControl.checked_hosts` is None), Slurm being asked."""
    if hosts is None:
        return "asking Slurm about its nodes…"
    return check_progress(latest, hosts)
