"""A node's part of the attempt takes its heartbeats: its own ranks only, and the processes gone
without an exit status told apart from a node that exited."""

from __future__ import annotations

from ddptui.run.following.state import NodeState
from tests.run.bed import two_host_record


def _node_b() -> NodeState:
    record = two_host_record()
    node = record.nodes[1]
    start = record.ranks_of(node).start
    return NodeState(node.host, node.node_rank, node.nproc, start, record.host_files(node))


def test_a_heartbeat_keeps_the_node_s_own_ranks_and_counts_the_others() -> None:
    node = _node_b()
    sample = {"ranks": {1: {"state": "R"}, 2: {"state": "S"}, 3: {"state": "T"}, 9: {}}, "x": 1}
    assert node.beat(True, sample) == 2
    assert node.sample == {"ranks": {2: {"state": "S"}, 3: {"state": "T"}}, "x": 1}
    assert node.alive is True
    assert node.beat(True, {"x": 2}) == 0
    assert node.sample == {"x": 2}


def test_two_heartbeats_in_a_row_without_the_processes_mean_they_vanished() -> None:
    node = _node_b()
    node.beat(False, {})
    node.beat(True, {})
    node.beat(False, {})
    assert not node.vanished
    node.beat(False, {})
    assert node.vanished


def test_a_node_whose_exit_status_arrived_has_exited_not_vanished() -> None:
    node = _node_b()
    node.exit = 1
    node.beat(False, {})
    node.beat(False, {})
    assert not node.vanished
