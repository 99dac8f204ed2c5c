"""A dump kept on the head (:func:`ddptui.run.evidence.kept.save`) and read back
(:func:`~ddptui.run.evidence.kept.load`): one file a node for people, an index for ddptui, and
what is read back shows as what was taken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddptui.present.stacks import dump_lines
from ddptui.run.evidence import kept as kept_dump
from ddptui.run.evidence.flight import FlightFinding
from ddptui.run.evidence.kept import DumpUnreadable, StackDump
from ddptui.run.evidence.stacks import RankStack, parse_stacks

WAITING = 'Thread 10 (idle): "MainThread"\n    all_reduce (c10d.py:2781)\n    step (loop.py:9)\n'
ODD = 'Thread 11 (idle): "MainThread"\n    sleep ☃ (loop.py:12)\n    step (loop.py:9)\n'
FORGED = "=== rank 0 (pid 1) via py-spy ===\n" + WAITING


def _stack(host: str, node: int, rank: int, text: str, note: str = "") -> RankStack:
    return RankStack(
        host, node, rank, 100 + rank, "py-spy", parse_stacks(text), note=note, text=text
    )


def _taken() -> StackDump:
    stacks = (
        _stack("gpu-a", 0, 0, WAITING),
        _stack("gpu-a", 0, 1, ODD, note="ptrace refused: faulthandler instead"),
        # A host's text that looks like a heading of its own, and one without its newline.
        _stack("gpu-b", 1, 2, FORGED),
        _stack("gpu-b", 1, 3, WAITING.rstrip("\n")),
        RankStack("gpu-b", 1, 4, 104, error="stopped (SIGSTOP): it cannot answer"),
    )
    return StackDump(
        "20261206-000000-abcd",
        1796500000.5,
        stacks,
        unanswered=("gpu-c: connect timed out",),
        attempts=(2,),
        flight=(FlightFinding("0", "rank 3 never entered #5", (3,)),),
        flight_errors=("rank 1's flight-recorder dump: not read",),
    )


def test_a_kept_dump_reads_back_as_it_was_taken_and_shows_the_same(tmp_path: Path) -> None:
    taken = _taken()
    saved = kept_dump.save(taken, tmp_path)
    assert saved.saved_in is not None
    back = kept_dump.load(saved.saved_in)
    assert back.stacks == taken.stacks
    assert (back.unanswered, back.attempts, back.flight) == (
        taken.unanswered,
        taken.attempts,
        taken.flight,
    )
    assert [line.plain for line in dump_lines(back)] == [line.plain for line in dump_lines(saved)]
    assert back.document() == saved.document()


def test_each_node_s_ranks_are_one_file_for_people(tmp_path: Path) -> None:
    saved = kept_dump.save(_taken(), tmp_path).saved_in
    assert saved is not None
    assert sorted(path.name for path in saved.iterdir()) == [
        "node0.txt",
        "node1.txt",
        kept_dump.STACKS_INDEX,
    ]
    node1 = (saved / "node1.txt").read_text()
    assert node1.startswith("=== rank 2 (pid 102) via py-spy ===\n=== rank 0 (pid 1) via")
    assert "=== rank 4 (pid 104) no stack: stopped (SIGSTOP): it cannot answer ===\n" in node1
    # The text without its newline is given one: the next heading starts a line.
    assert "step (loop.py:9)\n=== rank 4" in node1


def test_a_kept_dump_that_is_not_as_it_was_left_is_said_so(tmp_path: Path) -> None:
    saved = kept_dump.save(_taken(), tmp_path).saved_in
    assert saved is not None
    index = saved / kept_dump.STACKS_INDEX
    document = json.loads(index.read_text())
    document["ranks"][0]["file"] = "../node0.txt"
    index.write_text(json.dumps(document))
    with pytest.raises(DumpUnreadable, match=r"cannot be read: a rank's text is said to be in"):
        kept_dump.load(saved)
    index.write_text("{")
    with pytest.raises(DumpUnreadable, match=f"the stacks kept in {saved} cannot be read"):
        kept_dump.load(saved)
    index.unlink()
    with pytest.raises(DumpUnreadable):
        kept_dump.load(saved)
