"""The supervisor's journal: whole lines in order, segments that rotate within a bound, a
position that stays put across them, and offsets that survive a killed supervisor exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddptui.run import journal as journal_module
from ddptui.run.following.updates import FileLine
from ddptui.run.journal import Journal
from ddptui.run.protocol import decode


def _line(host: str, n: int, text: str = "x") -> FileLine:
    return FileLine(host, "events/rank0.jsonl", n * 10, f"{text} {n}")


def test_lines_come_back_whole_and_in_order_and_repeats_are_not_kept(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    for n in range(1, 6):
        assert journal.append(_line("a", n))
    assert not journal.append(_line("a", 3)), "a line already taken"
    assert journal.flush() and not journal.flush()
    lines = [decode(raw) for raw in journal.lines()]
    assert lines == [_line("a", n) for n in range(1, 6)]
    # A limit that cuts a line still returns the first whole line.
    start, data = journal.read(0, limit=5)
    assert start == 0
    assert data.count(b"\n") == 1 and decode(data) == _line("a", 1)


def test_segments_rotate_within_their_bound_and_a_lost_position_starts_at_the_oldest(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path, segment_bytes=1000, kept=2)
    for n in range(1, 200):
        journal.append(_line("a", n, "y" * 40))
        journal.flush()
    segments = sorted(tmp_path.glob("journal-*.jsonl"))
    assert len(segments) == 2
    assert sum(path.stat().st_size for path in segments) <= 2 * 1000 + 200
    assert journal.start > 0 and journal.end > journal.start
    start, data = journal.read(0)
    assert start == journal.start and decode(data.splitlines()[0]) is not None
    # Every line kept, in order, across the segments.
    kept = [decode(raw) for raw in journal.lines(0)]
    offsets = [line.offset for line in kept if isinstance(line, FileLine)]
    assert offsets == sorted(offsets) and offsets[-1] == 1990


def test_a_killed_supervisor_s_successor_resumes_from_exactly_what_was_kept(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path)
    for n in range(1, 4):
        journal.append(_line("a", n))
    journal.checkpoint()
    for n in range(4, 7):
        journal.append(FileLine("b", "node/attempt-1.out", n, f"out {n}"))
    journal.flush()
    # Killed: no checkpoint of the last lines, and a line left half-written on disk.
    (segment,) = tmp_path.glob("journal-*.jsonl")
    with segment.open("ab") as handle:
        handle.write(b'{"type":"line","h":"b","f":"node/attempt-1.o')
    again = Journal(tmp_path)
    assert again.offsets == {"a": {"events/rank0.jsonl": 30}, "b": {"node/attempt-1.out": 6}}
    assert again.end == segment.stat().st_size and segment.read_bytes().endswith(b"\n")
    assert not again.append(FileLine("b", "node/attempt-1.out", 6, "out 6"))
    assert again.append(FileLine("b", "node/attempt-1.out", 7, "out 7"))


def test_a_host_that_invents_files_without_end_is_not_followed_past_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "MAX_FILES_PER_HOST", 3)
    journal = Journal(tmp_path)
    taken = [journal.append(FileLine("a", f"events/rank{n}.jsonl", 1, "x")) for n in range(5)]
    assert taken == [True, True, True, False, False]
    assert journal.append(FileLine("b", "events/rank9.jsonl", 1, "x"))
    journal.checkpoint()
    saved = json.loads((tmp_path / "offsets.json").read_text())
    assert len(saved["offsets"]["a"]) == 3 and saved["position"] == journal.end
