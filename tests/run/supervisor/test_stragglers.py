"""The record's notes on stragglers: once when named, once when recovered, bounded."""

from __future__ import annotations

from ddptui.run.following.progress import RunProgress
from ddptui.run.supervisor.stragglers import MAX_NOTES, StragglerNotes


def _progress() -> RunProgress:
    run = RunProgress()
    for rank in range(4):
        run.expect("gpu-a" if rank < 2 else "gpu-b", rank // 2, rank % 2, rank)
    return run


def _name(run: RunProgress, rank: int, straggler: bool) -> None:
    progress = run.rank(rank)
    assert progress is not None
    progress.straggler = straggler
    progress.slow_since = 1796077338.0 if straggler else None
    progress.slower_by = 0.45


def test_a_straggler_is_noted_when_named_and_when_it_recovers() -> None:
    notes, run = StragglerNotes(), _progress()
    assert notes.changes(1, run) == []
    _name(run, 3, True)
    (named,) = notes.changes(1, run)
    assert named.startswith("straggler: rank 3 on gpu-b +45% since ")
    assert notes.changes(1, run) == []
    _name(run, 3, False)
    (recovered,) = notes.changes(1, run)
    assert recovered.startswith("rank 3 no longer a straggler at ")


def test_a_rank_that_comes_and_goes_is_noted_a_bounded_number_of_times() -> None:
    notes, run = StragglerNotes(), _progress()
    said = []
    for flip in range(4 * MAX_NOTES):
        _name(run, 3, flip % 2 == 0)
        said += notes.changes(1, run)
    assert len(said) == MAX_NOTES
    # A new attempt is noted afresh.
    _name(run, 3, True)
    assert len(notes.changes(2, run)) == 1
