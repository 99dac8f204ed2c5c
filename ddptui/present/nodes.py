"""A scheduler's nodes as the health screen lists them, for a cluster without fixed hosts (the
nodes of a ``[slurm]`` partition): each node's state and the scheduler's reason, its GPUs,
whether a run may get it; and the selected node beside its findings."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from ddptui.health import ClusterCheck, ScheduledNode
from ddptui.untrusted import plain

NODE_COLUMNS = ("node", "partition", "state", "GPUs", "a run gets it", "reason")
USABLE = Text("yes", "green")
EXCLUDED = Text("excluded", "dim")
"""Up, but kept off by ``[slurm] exclude``."""
UNAVAILABLE = Text("no", "bold red")


@dataclass(frozen=True)
class NodeRow:
    name: str
    cells: tuple[Text, ...]
    """By :data:`NODE_COLUMNS`."""


def node_rows(report: ClusterCheck | None) -> list[NodeRow]:
    """A row for each node the check found in the runs' partition; none before a check (the
    nodes are the scheduler's to list) or from a check of fixed hosts."""
    if report is None:
        return []
    usable = report.usable_nodes
    return [
        NodeRow(
            node.name,
            (
                Text(plain(node.name, limit=64, one_line=True)),
                Text(plain(node.partition, limit=64, one_line=True)),
                Text(node.state, "green" if node.usable else "bold red"),
                Text("—" if node.gpus is None else str(node.gpus), justify="right"),
                _gets_it(node, usable),
                Text(node.reason or "", "dim"),
            ),
        )
        for node in report.scheduled_nodes
    ]


def _gets_it(node: ScheduledNode, usable: frozenset[str]) -> Text:
    if node.name in usable:
        return USABLE
    return EXCLUDED if node.usable else UNAVAILABLE


def node_text(report: ClusterCheck, name: str) -> Text | None:
    """Node ``name`` as the health screen shows it beside its findings: its state and the
    scheduler's reason, its GPUs; None when ``report`` did not list it."""
    node = next((node for node in report.scheduled_nodes if node.name == name), None)
    if node is None:
        return None
    text = Text(f"{node.name} in partition {node.partition}\n", "bold")
    text.append(f"state: {node.state}", "green" if node.usable else "bold red")
    if node.reason:
        text.append(f" ({node.reason})")
    gpus = "none that Slurm schedules" if node.gpus is None else str(node.gpus)
    text.append(f"\nGPUs: {gpus}\n")
    return text
