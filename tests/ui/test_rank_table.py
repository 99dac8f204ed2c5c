"""The rank table's rows as the console shows them: the marks the docs promise (docs/console.md)."""

from __future__ import annotations

from collections.abc import Collection

from ddptui.run.following.state import Hang, Judgement, RankAtHang, Straggler
from ddptui.run.record import RunState
from ddptui.ui.widgets.rank_table import RANK_COLUMNS, _flat_rows, _grouped_rows, _Marks
from tests.ui import scenes

STATE = RANK_COLUMNS.index("state")


def _marks(
    named: tuple[Straggler, ...], silent: Collection[str] = (), hang: Hang | None = None
) -> _Marks:
    """The marks as the supervisor's judgement carries them: the silent hosts, the hang, the
    stragglers its judging named."""
    notes = dict.fromkeys(silent, "no answer")
    judgement = Judgement(RunState.RUNNING, 1, "", notes, hang, stragglers=named)
    return _Marks.of_judgement(judgement)


def test_a_straggler_s_row_and_its_node_s_row_carry_the_mark() -> None:
    run, named = scenes.straggling_run()
    ranks = run.ranks

    rows = _flat_rows(ranks, _marks(named))
    assert rows["3"].cells[STATE].plain == "running ▼ straggler +45%"
    assert "▼ straggler +45%" in rows["3"].words
    # Only the slow rank is marked: its peers on the same node are healthy.
    assert [rows[str(rank)].cells[STATE].plain for rank in range(3)] == ["running"] * 3

    grouped = _grouped_rows(ranks, _marks(named), expanded={1})
    # The straggler's node first: the worst node leads whatever its number.
    assert list(grouped)[:1] == ["node1"]
    assert grouped["node1"].cells[STATE].plain == "2 running ▼ r3 +45%"
    assert grouped["node0"].cells[STATE].plain == "2 running"
    # Expanded, the node shows the rank's own row under it, mark and all.
    assert grouped["3"].cells[STATE].plain == "running ▼ straggler +45%"


def _hang(stuck: int | None) -> Hang:
    """The supervisor's hang over the four ranks, rank ``stuck``'s process stopped."""
    return Hang(
        since=0.0,
        window_s=20.0,
        step=80,
        ranks=tuple(
            RankAtHang(rank, host, 80, "T", 0.0, "its process is stopped (SIGSTOP…)")
            if rank == stuck
            else RankAtHang(rank, host, 80, "S", 95.0, None)
            for rank, host in enumerate(scenes.STRAGGLING_HOSTS)
        ),
    )


def test_in_a_hang_the_stuck_rank_is_marked_apart_from_those_that_wait_for_it() -> None:
    run, named = scenes.straggling_run()
    ranks = run.ranks
    marks = _marks(named, hang=_hang(stuck=1))

    rows = _flat_rows(ranks, marks)
    assert [rows[str(rank)].cells[STATE].plain for rank in range(4)] == [
        "running … waiting",
        "running ⏸ stuck",
        "running … waiting",
        "running … waiting ▼ straggler +45%",
    ]
    # The stuck rank's row is the one the table points at first, ahead of the straggler's.
    assert rows["1"].severity > rows["3"].severity > rows["0"].severity

    grouped = _grouped_rows(ranks, marks, expanded=set())
    assert list(grouped) == ["node0", "node1"]
    assert grouped["node0"].cells[STATE].plain == "2 running ⏸ r1 stuck"
    assert grouped["node1"].cells[STATE].plain == "2 running … 2 waiting ▼ r3 +45%"


def test_a_hang_in_which_every_rank_waits_alike_marks_none_stuck() -> None:
    run, named = scenes.straggling_run()
    rows = _flat_rows(run.ranks, _marks(named, hang=_hang(stuck=None)))
    assert {rows[str(rank)].cells[STATE].plain.split(" ▼")[0] for rank in range(4)} == {
        "running … waiting"
    }


def test_a_silent_host_s_ranks_say_so_rather_than_their_part_in_the_hang() -> None:
    run, named = scenes.straggling_run()
    rows = _flat_rows(run.ranks, _marks(named, silent={"gpu-a"}, hang=_hang(stuck=1)))
    assert rows["1"].cells[STATE].plain == "running ⌁ no answer"
    assert rows["2"].cells[STATE].plain == "running … waiting"


def test_a_straggler_is_marked_only_where_the_supervisor_named_it() -> None:
    # The table's own copy of the events may say rank 3 is slow; the supervisor has the word.
    run, _ = scenes.straggling_run()
    unnamed = Judgement(RunState.RUNNING, 1, "")
    rows = _flat_rows(run.ranks, _Marks.of_judgement(unnamed))
    assert rows["3"].cells[STATE].plain == "running"
