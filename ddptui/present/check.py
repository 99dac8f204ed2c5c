"""The check report's words: findings with their fixes, the master-port note, the summary and a
host's status, as ``ddptui check`` prints them and the health screen shows them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from rich.text import Text

from ddptui.check import CheckReport, PortTest
from ddptui.health import Code, Finding, HostCheck, Severity
from ddptui.health.groups import FindingGroup, group_findings
from ddptui.health.slurm import SlurmCheck
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


def port_test_note(test: PortTest) -> Text | None:
    """Why the master port test did not run, as an information line; None when it ran."""
    if test.ran:
        return None
    return Text.assemble(_mark(Severity.INFO), f"master port test skipped: {test.why}")


def summary(report: CheckReport) -> Text:
    """``healthy: 3 hosts ready, 1 warning (2.1 s)`` in green, or ``not healthy: 2 errors,
    1 warning (2.1 s)`` in red: counted as the report lists them, one for a line that several
    hosts share."""
    counts = Counter(group.severity for group in listed(report.findings))
    took = f"({report.elapsed_s:.1f} s)"
    if report.healthy:
        warnings = counts[Severity.WARNING]
        extra = f", {_count(warnings, 'warning')}" if warnings else ""
        ready = f"{_count(len(report.checks), 'host')} ready"
        return Text(f"healthy: {ready}{extra} {took}", style="bold green")
    parts = [
        _count(counts[severity], severity.value)
        for severity in (Severity.ERROR, Severity.WARNING)
        if counts[severity]
    ]
    return Text(f"not healthy: {', '.join(parts)} {took}", style="bold red")


def host_status(check: HostCheck) -> Text:
    """A host's status cell: ``ok`` in green, else ``probe failed`` or how SSH failed, in red."""
    if check.probe_failure is not None:
        return Text("probe failed", "red")
    if not check.reach.ok:
        # In words, as the findings say them: `host key unknown`, not the code `hostkey_unknown`.
        words = check.reach.reach.value.replace("hostkey", "host key").replace("_", " ")
        return Text(words, "red")
    return Text("ok", "green")


_NO_DRIVER = ("pynvml is not installed", "LibraryNotFound", "nvidia-smi not found")
"""What the probe says when a host has no NVIDIA driver to ask (a CPU-only host)."""


def gpu_absence(problem: str) -> str:
    """Why a host shows no GPU, in words: a CPU-only host is no error."""
    parts = [part.strip() for part in problem.split(";") if part.strip()]
    if not parts or all(any(sign in part for sign in _NO_DRIVER) for part in parts):
        return "no NVIDIA GPU: no NVIDIA driver here (a CPU-only host)"
    return f"no NVIDIA GPU found: {problem}"


def _mark(severity: Severity) -> Text:
    symbol, style = _SEVERITY[severity]
    return Text(f"{symbol} ", style)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number != 1)}"


def slurm_summary(check: SlurmCheck) -> Text:
    """``healthy: partition debug, 3 of 4 nodes usable, 1 warning`` or ``not healthy: …``."""
    counts = Counter(group.severity for group in listed(check.findings))
    where = f"partition {check.partition}, " if check.partition else ""
    usable = f"{where}{len(check.usable)} of {_count(len(check.nodes), 'node')} usable"
    parts = [
        _count(counts[severity], severity.value)
        for severity in (Severity.ERROR, Severity.WARNING)
        if counts[severity]
    ]
    if check.healthy:
        return Text(f"healthy: {', '.join([usable, *parts])}", style="bold green")
    return Text(f"not healthy: {', '.join([*parts, usable])}", style="bold red")
