"""The interconnect, measured (``ddptui check --bandwidth``): what the benchmark's all-reduces
took, as nccl-tests reports them, and the host whose links are slow.

Pure: the benchmark's JSON comes from node 0's torchrun, untrusted, and is checked field by field.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ddptui.errors import DdptuiError
from ddptui.untrusted import count, finite

SLOW_SHARE = 0.5
"""A host is named when its best pair reaches less than this share of the hosts' median."""
MAX_BYTES = 1 << 40


@dataclass(frozen=True)
class SweepRow:
    size: int
    seconds: float
    world_size: int

    @property
    def algbw(self) -> float:
        """Bytes per second of the buffer (nccl-tests' algbw)."""
        return self.size / self.seconds

    @property
    def busbw(self) -> float:
        """algbw × 2(n−1)/n: what each link carried, comparable across host counts."""
        return self.algbw * 2 * (self.world_size - 1) / self.world_size


@dataclass(frozen=True)
class PairRow:
    first: str
    second: str
    size: int
    seconds: float

    @property
    def algbw(self) -> float:
        return self.size / self.seconds


@dataclass(frozen=True)
class SlowHost:
    host: str
    best: float
    """Its fastest pair's algbw."""
    median: float
    """The median over hosts of each host's fastest pair."""


@dataclass(frozen=True)
class BandwidthReport:
    backend: str
    interfaces: tuple[str, ...]
    """Each host's socket interface, as the benchmark was started (``host=ifname``)."""
    sweep: tuple[SweepRow, ...]
    pairs: tuple[PairRow, ...]

    @property
    def hosts(self) -> list[str]:
        return list(
            dict.fromkeys(name for pair in self.pairs for name in (pair.first, pair.second))
        )

    @property
    def slow(self) -> list[SlowHost]:
        """Hosts whose every pair is slow, against the others' best pairs. Two hosts share one
        pair: which of them is slow cannot be told."""
        best: dict[str, float] = {}
        for pair in self.pairs:
            for name in (pair.first, pair.second):
                best[name] = max(best.get(name, 0.0), pair.algbw)
        if len(best) < 3:
            return []
        median = statistics.median(best.values())
        return [
            SlowHost(name, value, median)
            for name, value in best.items()
            if value < SLOW_SHARE * median
        ]


class BenchError(ValueError):
    """Node 0's output is no benchmark result (quoted as little as needed)."""


class BandwidthError(DdptuiError):
    """The benchmark did not run to its end (a host failed, or node 0 said nothing usable)."""


def read_result(
    output: str, names: Sequence[str], pair_bytes: int, interfaces: Sequence[str]
) -> BandwidthReport:
    """The benchmark's document (its last JSON line) for hosts ``names`` in node-rank order."""
    document = None
    for line in reversed(output.splitlines()[-200:]):
        if line.startswith("{"):
            try:
                document = json.loads(line)
            except (ValueError, RecursionError):
                continue
            break
    if not isinstance(document, dict):
        raise BenchError("node 0's benchmark printed no result")
    world = count(document.get("world_size"), 1 << 16)
    backend = document.get("backend")
    sweep, pairs = document.get("sweep"), document.get("pairs")
    if world != len(names) or backend not in ("gloo", "nccl"):
        raise BenchError("node 0's benchmark result names another cluster")
    if not isinstance(sweep, list) or not isinstance(pairs, list):
        raise BenchError("node 0's benchmark result is incomplete")
    rows = []
    for item in sweep[:64]:
        size, seconds = _pair_of(item, 2)
        rows.append(SweepRow(size, seconds, world))
    measured = []
    for item in pairs[: 2 * world]:
        if not (isinstance(item, list) and len(item) == 3):
            raise BenchError("node 0's benchmark result has a garbled pair")
        first, second = count(item[0], world - 1), count(item[1], world - 1)
        took = finite(item[2])
        if first is None or second is None or took is None or took <= 0:
            raise BenchError("node 0's benchmark result has a garbled pair")
        measured.append(PairRow(names[first], names[second], pair_bytes, took))
    return BandwidthReport(str(backend), tuple(interfaces), tuple(rows), tuple(measured))


def _pair_of(item: object, length: int) -> tuple[int, float]:
    if not (isinstance(item, list) and len(item) == length):
        raise BenchError("node 0's benchmark result has a garbled size")
    size, seconds = count(item[0], MAX_BYTES), finite(item[1])
    if size is None or seconds is None or seconds <= 0:
        raise BenchError("node 0's benchmark result has a garbled size")
    return size, seconds
