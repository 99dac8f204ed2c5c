"""NCCL's own ``Init timings`` line (``--debug``), read from a rank's output into the launch
timeline: the recorded line, hostile ones, and where it shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddptui.present.timeline import bars, status_lines
from ddptui.run.following.model import RunModel
from ddptui.run.following.nccl_init import MAX_PARTS, NcclInit, parse
from ddptui.run.following.updates import FileLine
from ddptui.run.timeline import Timeline
from tests.run.test_timeline import _timed_record

RECORDED = (
    Path(__file__).parents[2] / "fixtures" / "nccl" / "healthy-init.NCCL_DEBUG=INFO.stdout.txt"
)
"""An H200's rank with NCCL_DEBUG=INFO (shared/recordings/h200)."""


def _recorded_line() -> str:
    return next(line for line in RECORDED.read_text().splitlines() if "Init timings" in line)


def test_the_recorded_line_gives_the_total_and_each_part_in_nccl_s_order() -> None:
    init = parse(_recorded_line(), rank=3)
    assert init is not None
    assert (init.rank, init.total_s) == (3, 0.35)
    assert [name for name, _ in init.parts] == [
        "kernels", "alloc", "bootstrap", "allgathers", "topo", "graphs", "connections", "rest",
    ]  # fmt: skip
    assert dict(init.parts)["kernels"] == 0.34
    assert init.words() == "NCCL init 0.35 s (kernels 0.34, connections 0.01)"


@pytest.mark.parametrize(
    "line",
    [
        "NCCL INFO Init COMPLETE",
        "NCCL INFO Init timings - ncclCommInitRankConfig: rank 0 nranks 1 total nan (kernels 1)",
        "NCCL INFO Init timings - ncclCommInitRankConfig: rank 0 nranks 1 total 1e999 (x 1)",
        "NCCL INFO Init timings - ncclCommInitRankConfig: rank 0 nranks 1 total 99999999 (x 1)",
        "Init timings - ncclCommInitRank: rank 0 nranks 1 total 0.5 (unclosed",
    ],
)
def test_a_line_that_is_not_the_timing_or_is_out_of_bounds_gives_nothing(line: str) -> None:
    assert parse(line, rank=0) is None


def test_a_hostile_line_keeps_only_bounded_parts_with_plain_names() -> None:
    many = ", ".join(f"{chr(97 + number // 26)}{chr(97 + number % 26)} 0.1" for number in range(40))
    line = f"Init timings - ncclCommInitRankConfig: rank 0 nranks 2 total 2.0 ({many})"
    init = parse(line, rank=1)
    assert init is not None and len(init.parts) == MAX_PARTS
    escapes = "Init timings - ncclCommInitRank: rank 0 nranks 2 total 1.5 (\x1b]52;c;boom 1.0)"
    init = parse(escapes, rank=0)
    assert init is not None and all(name.isascii() and name.isalpha() for name, _ in init.parts)
    assert "\x1b" not in init.words()


def test_the_record_form_round_trips_and_garbage_is_dropped() -> None:
    init = parse(_recorded_line(), rank=2)
    assert init is not None
    assert NcclInit.from_document(json.loads(json.dumps(init.to_document()))) == init
    for garbage in (None, [], {"rank": "0", "total_s": 1.0}, {"rank": 0, "total_s": -1.0}):
        assert NcclInit.from_document(garbage) is None
    odd = {"rank": 0, "total_s": 1.0, "parts": {"ok": 0.5, "bad name": 0.1, "nan": "x"}}
    assert NcclInit.from_document(odd) == NcclInit(0, 1.0, (("ok", 0.5),))


def test_a_timeline_keeps_each_host_s_slowest_and_says_it_in_json_and_toml() -> None:
    timeline = Timeline(1, 0.0, {"a": {"first_step": 5.0}})
    assert timeline.note_nccl("a", NcclInit(0, 0.3))
    assert timeline.note_nccl("a", NcclInit(1, 0.9, (("bootstrap", 0.8),)))
    assert not timeline.note_nccl("a", NcclInit(0, 0.5))
    assert Timeline.from_document(timeline.to_document()) == timeline
    host = timeline.to_json(["a"])["hosts"][0]
    assert host["nccl_init"] == {
        "rank": 1,
        "total_s": 0.9,
        "parts": {"bootstrap": 0.8},
        "words": "NCCL init 0.90 s (bootstrap 0.80)",
    }
    without = Timeline(1, 0.0, {"b": {"first_step": 5.0}})
    assert "nccl" not in without.to_document()
    assert without.to_json(["b"])["hosts"][0]["nccl_init"] is None


def test_the_model_reads_it_from_a_rank_s_output_of_this_attempt_only() -> None:
    model = RunModel(_timed_record())
    line = _recorded_line()
    slow = line.replace("total 0.35", "total 1.20")
    model.apply(FileLine("a", "logs/attempt-1/x_y/attempt_0/1/stdout.log", 1, line))
    model.apply(FileLine("b", "logs/attempt-1/x_y/attempt_0/0/stdout.log", 1, slow))
    # An earlier attempt's line, and torchrun's own output, are not this attempt's ranks'.
    model.apply(FileLine("a", "logs/attempt-0/x_y/attempt_0/0/stdout.log", 1, slow))
    model.apply(FileLine("a", "node/torchrun-attempt-1.out", 1, slow))
    timeline = model.timeline()
    assert timeline is not None
    assert {host: (init.rank, init.total_s) for host, init in timeline.nccl.items()} == {
        "a": (1, 0.35),
        "b": (2, 1.20),
    }
    said = "\n".join(line.plain for line in status_lines(timeline, ["a", "b"]))
    assert "NCCL init 1.20 s on rank 2 (kernels 0.34, connections 0.01)" in said
    drawn = "\n".join(line.plain for line in bars(timeline, ["a", "b"], 80))
    assert "NCCL init 1.20 s on b rank 2 (kernels 0.34, connections 0.01)" in drawn
