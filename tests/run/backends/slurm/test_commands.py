"""Slurm's node listings as ddptui asks for them: a fake ``sinfo`` on PATH answers whatever
``-o`` format it is asked for, field by field, as the real one does, so every listing is read
as it asks (one listing once asked for four fields while the reader took five, and a node Slurm
had lost read as no node at all)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ddptui.run.backends.slurm import commands

SINFO = """#!{python}
import sys

NODES = {{
    "node0": {{"N": "node0", "P": "debug*", "T": "idle", "G": "gpu:h200:8(S:0-1)", "E": "none"}},
    "node1": {{"N": "node1", "P": "debug*", "T": "down*", "G": "(null)", "E": "Not responding"}},
}}
args = sys.argv[1:]
spec = args[args.index("-o") + 1]
names = args[args.index("-n") + 1].split(",") if "-n" in args else list(NODES)
for name in names:
    node, line, rest = NODES[name], "", spec
    while rest:
        if rest[0] == "%":
            line, rest = line + node[rest[1]], rest[2:]
        else:
            line, rest = line + rest[0], rest[1:]
    print(line)
"""


@pytest.fixture(autouse=True)
def _fake_sinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text(SINFO.format(python=sys.executable))
    (bin_dir / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def test_a_lost_node_reads_as_slurm_lists_it() -> None:
    (node,) = commands.node_states(["node1"])
    assert (node.name, node.state, node.reason, node.usable) == (
        "node1",
        "down*",
        "Not responding",
        False,
    )


def test_the_partition_s_nodes_read_with_their_gpus() -> None:
    assert [(node.name, node.state, node.gpus) for node in commands.nodes()] == [
        ("node0", "idle", 8),
        ("node1", "down*", None),
    ]
