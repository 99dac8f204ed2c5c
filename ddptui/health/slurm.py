"""The check of a Slurm cluster before a run is submitted (pure): which nodes of the partition
Slurm can give a job, and whether they are enough.

Slurm's answers (``sinfo -h -N -o "%N|%P|%T|%G|%E"``) are read defensively and every finding names
a node with what to do about it: the ``[slurm] exclude`` line that keeps runs off the bad ones,
or the ``nodes`` the partition can take.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ddptui.config.model import SlurmConfig
from ddptui.health.cluster_check import ClusterCheck
from ddptui.health.findings import Code, Finding, Severity
from ddptui.untrusted import plain

MAX_NODES = 100_000
"""Lines of ``sinfo`` read: more nodes than a cluster has."""
_NODE = re.compile(r"[A-Za-z0-9._-]{1,64}", re.ASCII)
UNAVAILABLE = frozenset(
    {
        "down",
        "drained",
        "draining",
        "fail",
        "failing",
        "future",
        "inval",
        "maint",
        "reboot_issued",
        "reboot_requested",
        "unknown",
    }
)
"""Node states (``sinfo %T``, flags stripped) in which Slurm starts no new job there."""
_FLAGS = "*~#!%$@^-+"
"""What ``sinfo`` appends to a state: ``*`` not responding, ``~`` powered off, ``#`` powering
up, ``%`` powering down, ``$`` maintenance reservation, ``@`` reboot pending…"""


@dataclass(frozen=True)
class SlurmCheck(ClusterCheck):
    """The check of a Slurm cluster: the partition's nodes and what stands in a run's way."""

    partition: str | None
    """The partition the runs go to, as Slurm names it (the default one's name when the hosts
    file names none); None when Slurm has no such partition."""
    nodes: tuple[SlurmNode, ...]
    """The partition's nodes."""
    usable: tuple[str, ...]
    """The nodes a run may get: up, and not in ``[slurm] exclude``."""
    findings: tuple[Finding, ...]

    @property
    def fixed_hosts(self) -> bool:
        return False

    @property
    def ready(self) -> str:
        where = f"partition {self.partition}, " if self.partition else ""
        nodes = len(self.nodes)
        return f"{where}{len(self.usable)} of {nodes} node{'s' * (nodes != 1)} usable"

    @property
    def duration_s(self) -> None:
        return None

    @property
    def scheduled_nodes(self) -> tuple[SlurmNode, ...]:
        return self.nodes

    @property
    def usable_nodes(self) -> frozenset[str]:
        return frozenset(self.usable)

    def to_json(self) -> dict[str, Any]:
        """``ddptui check --json`` of a Slurm cluster."""
        return {
            "partition": self.partition,
            "nodes": [
                {"name": node.name, "state": node.state, "reason": node.reason, "gpus": node.gpus}
                for node in self.nodes
            ],
            "usable": list(self.usable),
            "findings": [finding.to_json() for finding in self.findings],
        }


@dataclass(frozen=True)
class SlurmNode:
    """One node in one partition, as ``sinfo`` lists it."""

    name: str
    partition: str
    default_partition: bool
    state: str
    reason: str | None
    gpus: int | None = None
    """The GPUs Slurm schedules on it (its ``gpu`` generic resources); None when it has none."""

    @property
    def usable(self) -> bool:
        """Whether Slurm would give this node to a new job (busy nodes count: they free up)."""
        base = self.state.lower().rstrip(_FLAGS)
        return base not in UNAVAILABLE and not self.state.endswith("*")


SINFO_FORMAT = "%N|%P|%T|%G|%E"
"""What ``sinfo -o`` is asked for, whichever nodes: what :func:`parse_sinfo` reads."""


def parse_sinfo(text: str) -> list[SlurmNode]:
    """The nodes of ``sinfo -h -N -o SINFO_FORMAT``; lines that are not one are skipped.
    The reason, an administrator's free text, comes last: a ``|`` in it stays in it."""
    nodes = []
    for line in text.splitlines()[:MAX_NODES]:
        fields = line.strip().split("|", 4)
        if len(fields) != 5:
            continue
        name, partition, state, gres, reason = fields
        default = partition.endswith("*")
        partition = partition.removesuffix("*")
        if not _NODE.fullmatch(name) or not _NODE.fullmatch(partition) or not state:
            continue
        nodes.append(
            SlurmNode(
                name=name,
                partition=partition,
                default_partition=default,
                state=plain(state[:40]),
                reason=None if reason in ("", "none", "(null)") else plain(reason[:200]),
                gpus=gpu_count(gres),
            )
        )
    return nodes


_GPUS = re.compile(r"gpu(?::[A-Za-z0-9._-]{1,64})?:(\d{1,6})", re.ASCII)
MAX_GPUS = 4096
"""More GPUs on one node than any has: a count past it is no count."""
MAX_GRES_CHARS = 1000


def gpu_count(gres: str) -> int | None:
    """The GPUs in a node's ``%G`` (``gpu:8``, ``gpu:h200:8(S:0-1)``, ``gpu:a100:4,gpu:v100:2``;
    ``(null)`` for none), summed over their types; None when it lists none."""
    counts = [
        int(found.group(1))
        for item in _outside_parentheses(gres[:MAX_GRES_CHARS]).split(",")
        if (found := _GPUS.fullmatch(item.strip()))
    ]
    total = sum(counts)
    return total if counts and total <= MAX_GPUS else None


def _outside_parentheses(text: str) -> str:
    """``text`` without what ``%G`` adds in parentheses after a count, the sockets the GPUs sit
    on (``(S:0-1)``, which may hold commas). One pass: a regex for it backtracks."""
    kept, depth = [], 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif not depth:
            kept.append(char)
    return "".join(kept)


def excluding(slurm: SlurmConfig, names: Sequence[str]) -> str:
    """The ``[slurm] exclude`` line that also keeps runs off ``names``."""
    kept = [*slurm.exclude, *(name for name in names if name not in slurm.exclude)]
    return "exclude = " + json.dumps(kept)


BUSY_STARTING = frozenset({Code.TORCH_IMPORT_TIMEOUT})
"""Findings that inside a starting job say how busy the node is, not what is wrong with it: the
probe runs as every rank imports torch on the same cores."""


def in_allocation(findings: Sequence[Finding]) -> list[Finding]:
    """The check's findings as they read inside a job that is starting: a torch import too slow
    to finish beside the ranks' own is a warning (the ranks will say if torch is broken)."""
    return [
        replace(
            finding,
            severity=Severity.WARNING,
            message=f"{finding.message}, while the job's ranks started beside it",
        )
        if finding.code in BUSY_STARTING and finding.severity is Severity.ERROR
        else finding
        for finding in findings
    ]


def allocation_errors(slurm: SlurmConfig, findings: Sequence[Finding]) -> str | None:
    """What the check inside a job's allocation found that the run cannot go on with, in a
    line: the errors, and the ``exclude`` line that keeps the next job off the nodes they name;
    None when there is no error."""
    errors = [finding for finding in findings if finding.severity is Severity.ERROR]
    if not errors:
        return None
    named = sorted({finding.host for finding in errors if finding.host is not None})
    said = "; ".join(
        f"{finding.host}: {finding.message}" if finding.host else finding.message
        for finding in errors
    )
    advice = f" ({excluding(slurm, named)} in [slurm] avoids {', '.join(named)})" if named else ""
    return f"the check inside the allocation found {len(errors)} error(s): {said}{advice}"


def evaluate_slurm(
    slurm: SlurmConfig, nodes: Sequence[SlurmNode], excluded: Collection[str]
) -> SlurmCheck:
    """What stands between ``slurm``'s runs and ``nodes`` (``excluded``: the node names
    ``[slurm] exclude`` expands to)."""
    partitions = sorted({node.partition for node in nodes})
    if slurm.partition is None:
        ours = [node for node in nodes if node.default_partition]
        where = f"the default partition{f' ({ours[0].partition})' if ours else ''}"
    else:
        ours = [node for node in nodes if node.partition == slurm.partition]
        where = f"partition {slurm.partition}"
    if not ours:
        known = ", ".join(partitions) or "none"
        problem = (
            f"Slurm has no partition {slurm.partition}"
            if slurm.partition is not None
            else "Slurm has no default partition"
        )
        missing = Finding(
            Code.SLURM_PARTITION_MISSING,
            Severity.ERROR,
            None,
            f"{problem} (partitions: {known})",
            "set [slurm] partition to one of them (`sinfo -s` lists them)",
        )
        return SlurmCheck(None, (), (), (missing,))
    candidates = [node for node in ours if node.name not in excluded]
    bad = [node for node in candidates if not node.usable]
    exclude_line = excluding(slurm, [node.name for node in bad])
    findings = [
        Finding(
            Code.SLURM_NODE_UNAVAILABLE,
            Severity.WARNING,
            node.name,
            f"{node.name} is {node.state} in Slurm"
            + (f" ({node.reason})" if node.reason else "")
            + ": no job starts there until an administrator returns it",
            f"{exclude_line} in [slurm] keeps runs from waiting for it; an administrator "
            f"returns it with `scontrol update NodeName={node.name} State=RESUME`",
        )
        for node in bad
    ]
    usable = [node.name for node in candidates if node.usable]
    if len(usable) < slurm.nodes:
        named = f" ({', '.join(usable)})" if usable else ""
        findings.append(
            Finding(
                Code.SLURM_TOO_FEW_NODES,
                Severity.ERROR,
                None,
                f"[slurm] nodes = {slurm.nodes}, but {where} has {len(usable)} node(s) a job "
                f"can get{named}: the job would wait until more come back",
                f"set [slurm] nodes to {len(usable)}"
                if usable
                else "pick another [slurm] partition, or ask an administrator",
            )
        )
    return SlurmCheck(ours[0].partition, tuple(ours), tuple(usable), tuple(findings))
