"""The interconnect benchmark's result, read and judged (:mod:`ddptui.health.bandwidth`), its
words, and the benchmark's pairing of hosts."""

from __future__ import annotations

import json

import pytest

from ddptui.health.bandwidth import BenchError, read_result
from ddptui.onhost.bench import rounds
from ddptui.present.bandwidth import bandwidth_lines, size_text

NAMES = ["node0", "node1", "node2", "node3"]
MIB = 1 << 20


def _result(pairs: list[list[float]], world: int = 4) -> str:
    sweep = [[64 * 1024, 0.001], [16 * MIB, 0.05]]
    document = {"backend": "gloo", "world_size": world, "sweep": sweep, "pairs": pairs}
    return "[W socket.cpp:207] a warning first\n" + json.dumps(document) + "\n"


def _read(pairs: list[list[float]], world: int = 4):  # type: ignore[no-untyped-def]
    return read_result(_result(pairs, world), NAMES[:world], 4 * MIB, ["node0=eth0"])


def test_busbw_is_algbw_times_2_n_minus_1_over_n() -> None:
    row = _read([[0, 1, 0.01]], world=2).sweep[1]
    assert row.algbw == pytest.approx(16 * MIB / 0.05)
    assert row.busbw == pytest.approx(row.algbw * 2 * 1 / 2)


def test_the_host_in_every_slow_pair_is_named() -> None:
    # node1's links: its two ring pairs take 25 times longer than the others.
    report = _read([[0, 1, 0.5], [2, 3, 0.02], [1, 2, 0.5], [3, 0, 0.02]])
    (slow,) = report.slow
    assert slow.host == "node1" and slow.best < 0.5 * slow.median
    lines = [line.plain for line in bandwidth_lines(report)]
    assert any(line.startswith("slow links: node1: its best pair 0.008 GB/s") for line in lines)


def test_pairs_alike_name_nobody() -> None:
    report = _read([[0, 1, 0.02], [2, 3, 0.025], [1, 2, 0.021], [3, 0, 0.03]])
    assert report.slow == []
    assert bandwidth_lines(report)[-1].plain == "no host's links are slower than half the others'"


def test_two_hosts_cannot_tell_which_is_slow() -> None:
    report = _read([[0, 1, 0.5]], world=2)
    assert report.slow == []
    assert "cannot be told" in bandwidth_lines(report)[-1].plain


@pytest.mark.parametrize(
    "output",
    [
        "",
        "no json here",
        '{"backend": "gloo", "world_size": 3, "sweep": [], "pairs": []}',
        '{"backend": "x", "world_size": 4, "sweep": [], "pairs": []}',
        '{"backend": "gloo", "world_size": 4, "sweep": [[1, -1]], "pairs": []}',
        '{"backend": "gloo", "world_size": 4, "sweep": [], "pairs": [[0, 9, 0.1]]}',
        '{"backend": "gloo", "world_size": 4, "sweep": [], "pairs": [[0, 1, NaN]]}',
    ],
    ids=["empty", "text", "other world", "backend", "negative", "no such rank", "nan"],
)
def test_what_is_no_result_says_so(output: str) -> None:
    with pytest.raises(BenchError):
        read_result(output, NAMES, 4 * MIB, [])


@pytest.mark.parametrize("world", [2, 3, 4, 5, 16])
def test_every_ring_pair_is_measured_once_and_no_round_shares_a_host(world: int) -> None:
    schedule = rounds(world)
    measured = [pair for chunk in schedule for pair in chunk]
    expected = {(rank, (rank + 1) % world) for rank in range(world)} if world > 2 else {(0, 1)}
    assert set(measured) == expected and len(measured) == len(expected)
    for chunk in schedule:
        hosts = [rank for pair in chunk for rank in pair]
        assert len(hosts) == len(set(hosts))


def test_sizes_read_as_binary_units() -> None:
    assert [size_text(size) for size in (65536, MIB, 1 << 30, 1000)] == [
        "64 KiB",
        "1 MiB",
        "1 GiB",
        "1000 B",
    ]
