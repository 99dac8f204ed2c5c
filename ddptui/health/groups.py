"""One entry for a finding that several hosts share: how a report stays readable at 64 hosts.

Only the human report groups; ``--json`` keeps one finding per host for scripts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ddptui.health.findings import Code, Finding, Severity
from ddptui.health.wording import hosts_list

EACH_HOST = "each host"
"""What a grouped message says where a single host's message named that host."""


@dataclass(frozen=True)
class FindingGroup:
    """Findings with the same code and severity whose messages differ only in the host named."""

    code: Code
    severity: Severity
    hosts: tuple[str, ...]
    """Empty for a cluster-wide finding."""
    message: str
    hint: str
    hint_host: str | None = None
    """When the hosts' fixes differ in more than their name: the host whose fix ``hint`` is."""

    @property
    def where(self) -> str:
        """The hosts, for a report line: ``"a, b and c"``, or the first few and a count."""
        return hosts_list(self.hosts)


def group_findings(findings: Iterable[Finding]) -> list[FindingGroup]:
    """``findings`` grouped, each group where its first finding was."""
    order: list[tuple[Code, Severity, str]] = []
    members: dict[tuple[Code, Severity, str], list[Finding]] = {}
    for index, finding in enumerate(findings):
        if finding.host is None:
            key = (finding.code, finding.severity, f"\0{index}")
        else:
            key = (finding.code, finding.severity, _generic(finding.message, finding.host))
        if key not in members:
            order.append(key)
            members[key] = []
        members[key].append(finding)
    return [_group(members[key]) for key in order]


def _group(findings: list[Finding]) -> FindingGroup:
    first = findings[0]
    named = [(finding.host, finding) for finding in findings if finding.host is not None]
    if len(named) < 2:
        alone = () if first.host is None else (first.host,)
        return FindingGroup(first.code, first.severity, alone, first.message, first.hint)
    hosts = tuple(host for host, _ in named)
    hints = {_generic(finding.hint, host) for host, finding in named}
    message = _generic(first.message, hosts[0])
    if len(hints) == 1:
        return FindingGroup(first.code, first.severity, hosts, message, hints.pop())
    return FindingGroup(first.code, first.severity, hosts, message, first.hint, hosts[0])


def _generic(text: str, host: str) -> str:
    """``text`` with the host's name, where it stands as a word, replaced by "each host"."""
    return re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", EACH_HOST, text)
