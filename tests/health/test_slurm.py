"""The check of a Slurm cluster, from ``sinfo`` as Slurm answers it (tests/fixtures/slurm) and as
it never does."""

from __future__ import annotations

from pathlib import Path

from ddptui.config.model import SlurmConfig
from ddptui.health import Code, Severity
from ddptui.health.slurm import SlurmNode, evaluate_slurm, parse_sinfo

FIXTURES = Path(__file__).parents[1] / "fixtures" / "slurm"


def _nodes(*lines: str) -> list[SlurmNode]:
    """``lines`` as ``NAME|PARTITION|STATE|REASON``, each answered with no GPUs (``%G`` of
    ``(null)``) between its state and its reason, as ``sinfo -o "%N|%P|%T|%G|%E"`` says it."""
    return parse_sinfo("\n".join(_without_gpus(line) for line in lines))


def _without_gpus(line: str) -> str:
    fields = line.split("|")
    return "|".join([*fields[:3], "(null)", fields[3]]) if len(fields) == 4 else line


def test_a_drained_node_is_named_with_the_exclude_line_that_avoids_it() -> None:
    recorded = (FIXTURES / "sinfo-drained.txt").read_text()
    # The recording groups nodes ("node[0,2]"); the check asks per node (-N), as here.
    nodes = _nodes(
        "node0|debug*|idle|none", "node1|debug*|drained|bad_gpu_ecc", "node2|debug*|idle|none"
    )
    assert "node1|drained|bad_gpu_ecc" in recorded
    check = evaluate_slurm(SlurmConfig(nodes=3, exclude=("gpu[07-08]",)), nodes, set())
    assert not check.healthy and check.partition == "debug" and check.usable == ("node0", "node2")
    unavailable, too_few = check.findings
    assert (unavailable.code, unavailable.severity, unavailable.host) == (
        Code.SLURM_NODE_UNAVAILABLE,
        Severity.WARNING,
        "node1",
    )
    assert unavailable.message == (
        "node1 is drained in Slurm (bad_gpu_ecc): no job starts there until an administrator "
        "returns it"
    )
    assert unavailable.hint.startswith('exclude = ["gpu[07-08]", "node1"] in [slurm]')
    assert "scontrol update NodeName=node1 State=RESUME" in unavailable.hint
    assert too_few.code is Code.SLURM_TOO_FEW_NODES and too_few.severity is Severity.ERROR
    assert too_few.message == (
        "[slurm] nodes = 3, but the default partition (debug) has 2 node(s) a job can get "
        "(node0, node2): the job would wait until more come back"
    )
    assert too_few.hint == "set [slurm] nodes to 2"
    # Two nodes are enough: the drained one is still said.
    fewer = evaluate_slurm(SlurmConfig(nodes=2), nodes, set())
    assert fewer.healthy and [f.code for f in fewer.findings] == [Code.SLURM_NODE_UNAVAILABLE]


def test_nodes_not_responding_down_or_excluded_are_not_counted() -> None:
    nodes = _nodes(
        "a1|gpu|idle*|none",
        "a2|gpu|down~|Not responding",
        "a3|gpu|mixed|none",
        "a4|gpu|allocated|none",
        "a5|gpu|draining@|reboot",
        "a6|gpu|idle|none",
        "a6|cpu*|idle|none",
    )
    check = evaluate_slurm(SlurmConfig(nodes=3, partition="gpu"), nodes, {"a6"})
    assert check.usable == ("a3", "a4")
    assert [f.host for f in check.findings if f.code is Code.SLURM_NODE_UNAVAILABLE] == [
        "a1",
        "a2",
        "a5",
    ]
    assert any(f.code is Code.SLURM_TOO_FEW_NODES for f in check.findings)


def test_a_partition_slurm_lacks_is_one_error_listing_the_ones_it_has() -> None:
    nodes = _nodes("n1|cpu*|idle|none", "n1|gpu|idle|none")
    check = evaluate_slurm(SlurmConfig(nodes=1, partition="gpus"), nodes, set())
    (missing,) = check.findings
    assert missing.code is Code.SLURM_PARTITION_MISSING
    assert missing.message == "Slurm has no partition gpus (partitions: cpu, gpu)"
    assert check.to_json()["partition"] is None


def test_lines_that_are_not_nodes_are_skipped_and_escapes_never_shown() -> None:
    nodes = _nodes(
        "",
        "garbage",
        "n1|gpu|idle",
        "n 1|gpu|idle|none",
        "n2|gpu|\x1b[2Jidle|\x1b]0;pwned\x07",
        "n3|gpu*|idle|none",
    )
    assert [node.name for node in nodes] == ["n2", "n3"]
    assert "\x1b" not in nodes[0].state and "\x1b" not in (nodes[0].reason or "")


def test_every_slurm_code_is_found_by_one_of_these_cases() -> None:
    found = {
        finding.code
        for config, nodes in (
            (SlurmConfig(nodes=3), _nodes("a|p*|idle|none", "b|p*|drained|x")),
            (SlurmConfig(nodes=1, partition="q"), _nodes("a|p*|idle|none")),
        )
        for finding in evaluate_slurm(config, nodes, set()).findings
    }
    assert found == {code for code in Code if code.value.startswith("slurm_")}


def test_a_node_s_gpus_are_counted_from_its_generic_resources() -> None:
    nodes = parse_sinfo(
        "\n".join(
            [
                "g1|gpu*|idle|gpu:8|none",
                "g2|gpu*|mixed|gpu:h200:8(S:0-1)|none",
                "g3|gpu*|idle|gpu:a100:4,gpu:v100:2(S:0,1),mps:400|none",
                "c1|gpu*|idle|(null)|none",
                "x1|gpu*|idle|gpu:99999999|none",
            ]
        )
    )
    assert [(node.name, node.gpus) for node in nodes] == [
        ("g1", 8),
        ("g2", 8),
        ("g3", 6),
        ("c1", None),
        ("x1", None),
    ]
    check = evaluate_slurm(SlurmConfig(nodes=1), nodes, set())
    assert check.to_json()["nodes"][0] == {
        "name": "g1",
        "state": "idle",
        "reason": None,
        "gpus": 8,
    }


def test_a_reason_with_a_bar_in_it_is_kept_whole() -> None:
    (node,) = parse_sinfo("n1|gpu*|drained|(null)|ECC | replace DIMM 3")
    assert (node.state, node.reason, node.gpus) == ("drained", "ECC | replace DIMM 3", None)
