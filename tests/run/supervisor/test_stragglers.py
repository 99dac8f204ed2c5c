"""Stragglers as the supervisor judges them (ddptui/run/supervisor/judging.py's slow_ranks, its
standing kept by stragglers.py's StragglerNotes) and what the record and the judgement say of
them: four ranks' step events, judged after each round as the supervisor's judge loop does."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ddptui.run.following.events import DoneEvent, StartEvent, StepEvent
from ddptui.run.following.model import RunModel
from ddptui.run.following.progress import STRAGGLER_EVENTS, RunProgress
from ddptui.run.following.state import NodeState, Straggler, clock_time
from ddptui.run.following.updates import Heartbeat
from ddptui.run.protocol import Judged, decode, message
from ddptui.run.supervisor import judging
from ddptui.run.supervisor.judging import STRAGGLER_WINDOW_S
from ddptui.run.supervisor.stragglers import MAX_NOTES, StragglerNotes
from tests.run.bed import two_host_record

HOSTS = ["gpu-a", "gpu-a", "gpu-b", "gpu-b"]
EVEN = [0.10, 0.10, 0.10, 0.10]
SLOW = [0.10, 0.10, 0.10, 0.145]
"""Rank 3 does 45% more work a step than the median."""


def _ids(rank: int) -> dict[str, Any]:
    return {"rank": rank, "local_rank": rank % 2, "node_rank": rank // 2, "world_size": 4}


class _Run:
    """Four ranks, one step event a second each (the ranks' clock), judged after each round."""

    def __init__(self) -> None:
        self.progress, self.notes, self.attempt = RunProgress(), StragglerNotes(), 1
        self.n, self.at, self.said = 0, 1000.0, list[str]()
        self.nodes: dict[str, NodeState] = {}
        """The attempt's nodes, by host, whose heartbeats say what slows a GPU."""
        for rank, host in enumerate(HOSTS):
            self.progress.apply(host, StartEvent(**_ids(rank), time=self.at, total_steps=10**6))

    def __call__(self, work: list[float], rounds: int = 1, **fields: Any) -> None:
        for _ in range(rounds):
            self.n, self.at = self.n + 1, self.at + 1.0
            for rank, own in enumerate(work):
                values = {"step_time_s": 0.2, "compute_s": own, **fields}
                if values["compute_s"] is None:
                    values["step_time_s"] = own
                event = StepEvent(**_ids(rank), time=self.at, step=self.n, **values)
                self.progress.apply(HOSTS[rank], event)
            self.said += self.notes.changes(self.attempt, self.progress, self.nodes)

    @property
    def named(self) -> list[tuple[int, str, float, float]]:
        named = self.notes.named(self.attempt)
        return [(s.rank, s.host, round(s.slower_by, 2), s.since) for s in named]


def test_a_rank_whose_own_work_is_slower_for_the_window_is_named_and_recovers() -> None:
    run = _Run()
    # Judged once it has a window of events: slow from then on, but not for long enough yet.
    run(SLOW, STRAGGLER_EVENTS)
    since = run.at
    while run.at < since + STRAGGLER_WINDOW_S:
        assert run.named == []
        run(SLOW)
    assert run.named == [(3, "gpu-b", 0.45, since)]
    # Between the thresholds it stays named; under 5% above, over its latest events, it is not.
    run([0.10, 0.10, 0.10, 0.107], STRAGGLER_EVENTS)
    assert [rank for rank, *_ in run.named] == [3]
    run(EVEN, STRAGGLER_EVENTS)
    assert run.named == []


def test_the_record_notes_a_straggler_once_when_named_and_once_when_it_recovers() -> None:
    run = _Run()
    run(SLOW, STRAGGLER_EVENTS + 2 * int(STRAGGLER_WINDOW_S))
    (named,) = run.said
    assert named.startswith("straggler: rank 3 on gpu-b +45% since ")
    run(EVEN, 2 * STRAGGLER_EVENTS)
    assert len(run.said) == 2 and run.said[1].startswith("rank 3 no longer a straggler at ")


def test_a_throttled_rank_slow_in_bursts_is_named_by_its_average() -> None:
    run = _Run()
    for n in range(3 * STRAGGLER_EVENTS):
        # One step in four a whole CFS period late: most steps take the usual time.
        run([0.10, 0.10, 0.10, 0.18 if n % 4 == 0 else 0.10])
    assert [rank for rank, *_ in run.named] == [3]


def test_a_short_slow_spell_is_no_straggler_and_leaves_no_standing() -> None:
    run = _Run()
    run(EVEN, STRAGGLER_EVENTS)
    # Two slow steps hold its average over the threshold while they are among its latest
    # events: 18 s, under the window.
    run([0.10, 0.10, 0.10, 0.25], 2)
    for _ in range(3 * STRAGGLER_EVENTS):
        run(EVEN)
        assert run.named == []
    assert run.said == []
    assert judging.slow_ranks(run.progress, {}) == {}


@pytest.mark.parametrize(
    ("own", "named"),
    [
        (0.109, False),  # +9%: under the threshold, however long
        (0.111, True),  # +11%: over it; a threshold anywhere from 1.10 up misses this one
    ],
)
def test_the_straggler_threshold_lies_between_nine_and_eleven_percent(
    own: float, named: bool
) -> None:
    run = _Run()
    # A window of events to be judged at all, then three windows' time: long past the wait.
    run([0.10, 0.10, 0.10, own], STRAGGLER_EVENTS + 3 * int(STRAGGLER_WINDOW_S))
    if named:
        ((rank, _, slower_by, _),) = run.named
        assert rank == 3 and slower_by == pytest.approx(0.11, abs=0.002)
    else:
        assert run.named == []


@pytest.mark.parametrize(
    ("own", "named"),
    [
        (0.104, False),  # +4%: under the 5% that un-names it
        (0.106, True),  # +6%: under the naming threshold, yet over the clearing one
    ],
)
def test_a_named_straggler_is_un_named_only_under_five_percent(own: float, named: bool) -> None:
    run = _Run()
    run(SLOW, STRAGGLER_EVENTS + 2 * int(STRAGGLER_WINDOW_S))
    assert [rank for rank, *_ in run.named] == [3]
    # Its whole average window at the new pace: no slow event left to hold it up.
    run([0.10, 0.10, 0.10, own], 2 * STRAGGLER_EVENTS)
    assert [rank for rank, *_ in run.named] == ([3] if named else [])


def test_a_rank_between_the_thresholds_is_named_only_once_over_the_threshold_again() -> None:
    run = _Run()
    run(SLOW, STRAGGLER_EVENTS)
    since = run.at
    # Slow since then, but between the thresholds for the window: not named, not forgotten.
    run([0.10, 0.10, 0.10, 0.107], STRAGGLER_EVENTS + int(STRAGGLER_WINDOW_S))
    assert run.named == []
    run(SLOW, STRAGGLER_EVENTS)
    assert [(rank, at) for rank, _, _, at in run.named] == [(3, since)]


def test_without_its_own_work_a_rank_s_step_time_is_judged() -> None:
    run = _Run()
    run([0.10, 0.10, 0.10, 0.14], 60, compute_s=None)
    assert [rank for rank, *_ in run.named] == [3]


def test_judging_is_pure_the_standing_is_what_it_is_handed() -> None:
    run = _Run()
    run(SLOW, STRAGGLER_EVENTS + 2 * int(STRAGGLER_WINDOW_S))
    first = judging.slow_ranks(run.progress, {})
    # Handed nothing, rank 3 is slow since its latest event, and not named yet.
    assert list(first) == [3] and not first[3].named and first[3].straggler.since == run.at
    before = {3: judging.Slow(Straggler(3, "gpu-b", 0.45, run.at - 60.0), named=False)}
    again = judging.slow_ranks(run.progress, before)
    assert again == judging.slow_ranks(run.progress, before) and before[3].named is False
    # Slow for a minute by what it is handed: named, since then.
    (named,) = judging.stragglers(again)
    assert (named.rank, named.host, named.since) == (3, "gpu-b", run.at - 60.0)
    assert named.slower_by == pytest.approx(0.45)


def test_ranks_that_ended_or_started_again_are_no_stragglers() -> None:
    run = _Run()
    run(SLOW, STRAGGLER_EVENTS + 2 * int(STRAGGLER_WINDOW_S))
    assert [rank for rank, *_ in run.named] == [3]
    run.progress.apply("gpu-b", DoneEvent(**_ids(3), time=run.at, step=run.n, reason="completed"))
    run.said += run.notes.changes(1, run.progress)
    assert run.named == [] and run.said[-1].startswith("rank 3 no longer a straggler")
    # Its events after its end say nothing of how it keeps up with the others.
    run(SLOW, STRAGGLER_EVENTS + 2 * int(STRAGGLER_WINDOW_S))
    assert run.named == []
    # Another attempt is judged afresh: none named in it before it is judged.
    assert run.notes.named(2) == ()


def test_with_no_work_to_compare_with_a_rank_keeps_its_standing_and_a_finite_number() -> None:
    run = _Run()
    run(SLOW, STRAGGLER_EVENTS + 2 * int(STRAGGLER_WINDOW_S))
    # Three ranks say they did no work at all: nothing to be slower than, and no end to how
    # much slower; what viewers are sent must still read back (a number, not infinity).
    run([0.0, 0.0, 0.0, 0.145], 2 * STRAGGLER_EVENTS)
    assert judging.slow_ranks(run.progress, {}) == {}
    ((rank, _, slower_by, _),) = run.named
    assert rank == 3 and math.isfinite(slower_by)


def test_a_rank_that_comes_and_goes_is_noted_a_bounded_number_of_times() -> None:
    run = _Run()
    for _ in range(MAX_NOTES):
        run(SLOW, STRAGGLER_EVENTS + int(STRAGGLER_WINDOW_S) + 1)
        run(EVEN, STRAGGLER_EVENTS)
    assert len(run.said) == MAX_NOTES
    # A new attempt is noted afresh.
    run.attempt, run.said = 2, []
    run(SLOW, STRAGGLER_EVENTS + int(STRAGGLER_WINDOW_S) + 1)
    assert [line.split(" since ")[0] for line in run.said] == ["straggler: rank 3 on gpu-b +45%"]


def test_the_judgement_names_what_judging_named_and_nothing_of_its_own() -> None:
    record = two_host_record()
    model = RunModel(record)
    for rank in range(4):
        model.progress.expect("ab"[rank // 2], rank // 2, rank % 2, rank)
    named = (Straggler(3, "b", 0.45, 1796077338.0),)
    judgement = model.judgement(record, None, named)
    assert judgement.stragglers == named
    assert "straggler rank 3 on b +45% since " in judgement.progress
    assert decode(message(Judged(judgement))) == Judged(judgement)
    unjudged = model.judgement(record)
    assert unjudged.stragglers == () and "straggler" not in unjudged.progress


HOT = 0x4 | 0x8 | 0x40
"""NVML's reasons for a GPU held down by its own heat (and at its power limit)."""


def _beat(model: RunModel, host: str, at: float, *gpus: dict[str, Any]) -> None:
    model.apply(Heartbeat(host, at, {1: True}, {"gpus": list(gpus)}))


def test_a_straggler_whose_gpu_is_throttled_is_named_with_that_cause() -> None:
    record = two_host_record()
    # Node b's ranks were given GPUs 6 and 3: rank 3 (its local rank 1) runs on GPU 3.
    record.nodes[1].env["CUDA_VISIBLE_DEVICES"] = "6,3"
    model = RunModel(record)
    run = _Run()
    run.nodes = {"gpu-b": model.nodes["b"]}
    hot_since = 1796077338.0
    # At its power limit only: no fault. Then hot, and dated by its first hot heartbeat.
    _beat(model, "b", hot_since - 2, {"index": 3, "throttle_reasons": 0x4})
    _beat(
        model,
        "b",
        hot_since,
        {"index": 6, "throttle_reasons": 0},
        {"index": 3, "throttle_reasons": HOT},
    )
    _beat(model, "b", hot_since + 2, {"index": 3, "throttle_reasons": HOT})
    run(SLOW, STRAGGLER_EVENTS + 2 * int(STRAGGLER_WINDOW_S))
    (straggler,) = run.notes.named(run.attempt)
    heat = "its own heat (hardware thermal slowdown)"
    assert straggler.cause == f"its GPU 3 has been slowed by {heat} since {clock_time(hot_since)}"
    (said,) = run.said
    assert said.startswith("straggler: rank 3 on gpu-b +45% since ")
    assert said.endswith(f": {straggler.cause}")
    # The judgement every viewer is sent, and `status --json`, carry it.
    judgement = model.judgement(record, None, (straggler,))
    assert decode(message(Judged(judgement))) == Judged(judgement)
    assert judgement.stragglers[0].words().endswith(f": {straggler.cause}")
    # Cool again: no cause, and the rank is still the straggler it is.
    _beat(model, "b", hot_since + 4, {"index": 3, "throttle_reasons": 0x4})
    run(SLOW)
    assert [s.cause for s in run.notes.named(run.attempt)] == [""]


def test_a_cause_that_comes_after_the_naming_is_noted_then() -> None:
    record = two_host_record()
    model = RunModel(record)
    run = _Run()
    run.nodes = {"gpu-b": model.nodes["b"]}
    run(SLOW, STRAGGLER_EVENTS + 2 * int(STRAGGLER_WINDOW_S))
    (named,) = run.said
    assert ": its GPU" not in named
    # No CUDA_VISIBLE_DEVICES (gloo on the host's CPUs): local rank 1's GPU is GPU 1.
    _beat(model, "b", 1796077338.0, {"index": 1, "throttle_reasons": 0x80 | 0x8})
    run(SLOW)
    assert len(run.said) == 2
    assert run.said[1].endswith(
        ": its GPU 1 has been slowed by a power brake from the system "
        f"since {clock_time(1796077338.0)}"
    )
    run(SLOW, 3)
    assert len(run.said) == 2
