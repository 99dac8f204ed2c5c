"""Reading torch's flight recorder (:mod:`ddptui.run.evidence.flight`) on real recordings, and on
what a hostile host could send instead."""

from __future__ import annotations

import os
import pickle
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddptui.run.evidence.flight import FlightDumpError, analyse, read_dump

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "flight"


def _traces(scenario: str, suffix: str = "") -> list:  # type: ignore[type-arg]
    return [
        read_dump(rank, (RECORDED / scenario / f"rank_{rank}{suffix}").read_bytes())
        for rank in range(3)
    ]


@pytest.mark.parametrize("suffix", ["", ".json"], ids=["pickle", "json"])
def test_the_rank_that_never_entered_the_collective_is_named(suffix: str) -> None:
    (finding,) = analyse(_traces("rank-behind", suffix), world_size=3)
    assert finding.odd_ranks == (2,)
    assert finding.text.startswith(
        "group 0 (default_pg): rank 2 never entered #5 (gloo:all_reduce [[1024]]"
    )
    assert "which ranks 0–1 wait in; its last was #4 (gloo:broadcast [[16]]" in finding.text


def test_the_frames_name_where_the_user_s_code_called_the_collective() -> None:
    (finding,) = analyse(_traces("rank-behind"))
    assert "called from <module> at train.py:" in finding.text
    assert "called from train_step at train.py:" in finding.text


@pytest.mark.parametrize("suffix", ["", ".json"], ids=["pickle", "json"])
def test_ranks_that_entered_different_collectives_are_named(suffix: str) -> None:
    (finding,) = analyse(_traces("mismatch", suffix), world_size=3)
    assert finding.odd_ranks == (1,)
    assert finding.text == (
        "group 0 (default_pg): the ranks disagree on collective #5: rank 1: gloo:broadcast "
        "[[1024]]; ranks 0, 2: gloo:all_reduce [[1024]]"
    )


def test_a_rank_without_a_dump_is_named() -> None:
    findings = analyse(_traces("rank-behind")[:2], world_size=3)
    assert findings[0].odd_ranks == (2,)
    assert findings[0].text.startswith("no flight-recorder dump from rank 2: ")
    assert findings[1].text.startswith("group 0 (default_pg): ranks 0–1 entered #5 (")


class _Runs:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, ("touch /tmp/ddptui-flight-pwned",)


def test_a_pickle_that_names_a_class_is_refused_unrun(tmp_path: Path) -> None:
    marker = Path("/tmp/ddptui-flight-pwned")
    marker.unlink(missing_ok=True)
    with pytest.raises(FlightDumpError, match="not a flight-recorder dump"):
        read_dump(0, pickle.dumps({"entries": [_Runs()]}))
    assert not marker.exists()


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b"[]", b'{"entries": 5}', pickle.dumps([1, 2]), b"\x80\x02}q\x00(X"],
    ids=["empty", "cut json", "list", "no list", "pickled list", "cut pickle"],
)
def test_what_is_no_dump_says_so(data: bytes) -> None:
    with pytest.raises(FlightDumpError):
        read_dump(0, data)


def _key(text: str) -> bytes:
    return b"X" + struct.pack("<I", len(text)) + text.encode()


def test_an_entry_nested_deep_is_read_without_recursion() -> None:
    depth = 200_000
    nested = b"]" * depth + b"a" * (depth - 1)
    entry = b"}" + _key("collective_seq_id") + b"K\x01s" + _key("profiling_name") + _key("x")
    entry += b"s" + _key("input_sizes") + nested + b"s"
    data = b"\x80\x02}" + _key("entries") + b"]" + entry + b"as."
    (collective,) = read_dump(0, data).collectives
    assert collective.sizes == "?"


@given(st.binary(max_size=2000))
def test_any_bytes_are_a_trace_or_an_error(data: bytes) -> None:
    try:
        trace = read_dump(0, data)
    except FlightDumpError:
        return
    assert all(collective.seq >= 0 for collective in trace.collectives)


def test_nccl_s_recorder_read_on_a_gpu_host_tells_completed_collectives() -> None:
    trace = read_dump(0, (RECORDED / "nccl-one-gpu" / "rank_0").read_bytes())
    assert [(c.seq, c.op, c.sizes, c.completed) for c in trace.collectives] == [
        (1, "nccl:all_reduce", "[[1024]]", True),
        (2, "nccl:broadcast", "[[16]]", True),
        (3, "nccl:all_reduce", "[[1024]]", True),
        (4, "nccl:broadcast", "[[16]]", True),
    ]
    (finding,) = analyse([trace], world_size=1)
    assert finding.text.startswith(
        "group 0 (default_pg): every rank completed #4 (nccl:broadcast [[16]], called from "
        "train_step at train.py:25), its last collective; none waits in this group"
    )
    assert finding.odd_ranks == ()
    # Its JSON form asked for active collectives only: with all four completed it lists none.
    with pytest.raises(FlightDumpError, match="holds no collectives: none in flight"):
        read_dump(0, (RECORDED / "nccl-one-gpu" / "rank_0.json").read_bytes())


def test_ranks_all_inside_one_unfinished_collective_point_at_the_collective_itself() -> None:
    # Ranks 0 and 1 of the gloo job: both wait in #5, and gloo marks nothing completed.
    (finding,) = analyse(_traces("rank-behind")[:2], world_size=2)
    assert finding.text.startswith("group 0 (default_pg): every rank entered #5 (gloo:all_reduce")
    assert finding.text.endswith("so the collective itself did not complete (the network, or a "
                                 "rank that died inside it)")  # fmt: skip
