"""The launch timeline: stages in order, what they add up to, its summary and its record form;
a node's rank stamps from its ranks' start and first step events, on the head node's clock."""

from __future__ import annotations

import json

import pytest

from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Steps
from ddptui.run.following.updates import FileLine
from ddptui.run.record import RunRecord
from ddptui.run.timeline import STAGES, Timeline, node_stamps
from tests.run.bed import two_host_record


def _timeline() -> Timeline:
    timeline = Timeline(1, 1000.0)
    for host, stamps in {
        "a": {"connected": 0.2, "probed": 1.0, "imported": 5.0, "first_step": 6.0},
        "b": {"connected": 0.3, "probed": 1.5, "imported": 8.5, "first_step": 9.0},
    }.items():
        for stage, at in stamps.items():
            assert timeline.stamp(host, stage, 1000.0 + at)
    return timeline


def test_a_host_s_stages_add_up_to_when_it_reached_its_last_one() -> None:
    timeline = _timeline()
    stages = timeline.stages("b")
    assert [stage.key for stage in stages] == ["connected", "probed", "imported", "first_step"]
    assert [round(stage.took_s, 3) for stage in stages] == [0.3, 1.2, 7.0, 0.5]
    assert sum(stage.took_s for stage in stages) == pytest.approx(timeline.reached("b"))
    assert timeline.first_step_s(["a", "b"]) == pytest.approx(9.0)
    assert timeline.summary(["a", "b"]) == (
        "first step in 9.0 s; slowest: b, 7.0 s waiting for the check's other hosts … importing "
        "torch"
    )


def test_nothing_is_summed_up_until_every_host_made_its_first_step() -> None:
    timeline = _timeline()
    del timeline.hosts["b"]["first_step"]
    assert timeline.first_step_s(["a", "b"]) is None and timeline.summary(["a", "b"]) is None
    assert not timeline.complete(["a", "b"]) and timeline.complete(["a"])


def test_a_stage_is_kept_once_and_an_impossible_one_not_at_all() -> None:
    timeline = _timeline()
    assert not timeline.stamp("a", "probed", 1003.0)
    assert timeline.hosts["a"]["probed"] == 1001.0
    assert not timeline.stamp("a", "lunch", 1003.0)
    assert not timeline.stamp("a", "staged", float("nan"))
    assert not timeline.stamp("a", "staged", 1000.0 + 30 * 24 * 3600)
    assert "staged" not in timeline.hosts["a"]


def test_a_stamp_before_the_one_before_it_takes_no_time_rather_than_negative_time() -> None:
    timeline = Timeline(1, 1000.0)
    timeline.stamp("a", "imported", 1005.0)
    # A host clock a little behind the head's: its rendezvous seems earlier than its import.
    timeline.stamp("a", "rendezvous", 1004.5)
    assert [stage.took_s for stage in timeline.stages("a")] == [5.0, 0.0]


def test_the_record_form_round_trips_and_bad_stamps_are_dropped() -> None:
    timeline = _timeline()
    assert Timeline.from_document(timeline.to_document()) == timeline
    document = timeline.to_document()
    document["hosts"]["a"]["lunch"] = 1.0
    document["hosts"]["a"]["staged"] = "soon"
    assert Timeline.from_document(document) == timeline
    with pytest.raises(TypeError):
        Timeline.from_document({"attempt": "1", "began": 0.0})


def test_the_json_form_lists_each_host_s_stages_and_the_slowest() -> None:
    document = _timeline().to_json(["a", "b"])
    assert document["first_step_s"] == 9.0 and document["slowest"] == "b"
    stages = document["hosts"][1]["stages"]
    doing = "waiting for the check's other hosts … importing torch"
    assert stages[2] == {"stage": "imported", "doing": doing, "at_s": 8.5, "took_s": 7.0}
    assert json.loads(json.dumps(document)) == document


def test_a_stage_after_stages_not_told_of_says_it_spans_them() -> None:
    timeline = Timeline(1, 0.0, {"a": {"connected": 1.0, "probed": 2.0, "ready": 9.0}})
    assert [stage.doing for stage in timeline.stages("a")] == [
        "connecting over SSH",
        "probing the host",
        "waiting for the check's other hosts … building the model and loading data",
    ]


def test_every_stage_has_words() -> None:
    assert all(doing for _, doing in STAGES)
    assert len({key for key, _ in STAGES}) == len(STAGES)


def test_a_node_s_stage_waits_for_every_rank_the_earliest_process_start_the_latest_else() -> None:
    ranks = {
        0: {"process": 10.0, "imported": 14.0, "first_step": 20.0},
        1: {"process": 10.5, "imported": 15.0},
    }
    assert node_stamps(ranks, [0, 1]) == {"spawned": 10.0, "imported": 15.0}
    assert node_stamps(ranks, [0]) == {"spawned": 10.0, "imported": 14.0, "first_step": 20.0}
    assert node_stamps(ranks, []) == {}


def _start(host: str, rank: int, at: float, **fields: object) -> FileLine:
    event = {"v": 1, "type": "start", "rank": rank, "local_rank": rank % 2}
    event.update({"node_rank": rank // 2, "world_size": 4, "time": at, **fields})
    return FileLine(host, f"events/rank{rank}.jsonl", 1, json.dumps(event))


def _step(host: str, rank: int, at: float) -> FileLine:
    event = {"v": 1, "type": "step", "rank": rank, "local_rank": rank % 2, "step": 1}
    event.update({"node_rank": rank // 2, "world_size": 4, "time": at, "loss": 1.0})
    return FileLine(host, f"events/rank{rank}.jsonl", 2, json.dumps(event))


def _timed_record() -> RunRecord:
    record = two_host_record()
    record.timelines = [Timeline(1, 1000.0, {"a": {"started": 1001.0}, "b": {"started": 1001.0}})]
    # b's clock runs 100 s ahead of the head node's.
    record.nodes[1].clock_offset_s = 100.0
    return record


@pytest.mark.parametrize("steps", [Steps.EVERY, Steps.LATEST])
def test_the_model_adds_the_ranks_stages_on_the_head_node_s_clock(steps: Steps) -> None:
    model = RunModel(_timed_record(), steps=steps)
    launch = {"process": 1002.0, "imported": 1004.0, "rendezvous": 1004.5}
    model.apply(_start("a", 0, 1005.0, launch=launch))
    model.apply(_start("a", 1, 1005.2, launch={**launch, "imported": 1004.2, "bad": 1.0}))
    b_launch = {key: at + 100.0 for key, at in launch.items()}
    model.apply(_start("b", 2, 1106.0, launch=b_launch))
    model.apply(_start("b", 3, 1106.0, launch=b_launch))
    for host, rank, at in (("a", 0, 1006.0), ("a", 1, 1006.5), ("b", 2, 1107.0)):
        model.apply(_step(host, rank, at))
    timeline = model.timeline()
    assert timeline is not None
    assert timeline.hosts["a"] == {
        "started": 1001.0,
        "spawned": 1002.0,
        "imported": 1004.2,
        "rendezvous": 1004.5,
        "ready": 1005.2,
        "first_step": 1006.5,
    }
    # Rank 3 has not stepped: b's first step waits for it.
    assert timeline.hosts["b"]["ready"] == 1006.0 and "first_step" not in timeline.hosts["b"]
    model.apply(_step("b", 3, 1107.5))
    timeline = model.timeline()
    assert timeline is not None and timeline.first_step_s(["a", "b"]) == pytest.approx(7.5)
    # The record's own timeline is not changed by the model's view of it.
    assert "spawned" not in model.record.timelines[0].hosts["a"]


def test_a_record_without_a_timeline_gives_none() -> None:
    assert RunModel(two_host_record()).timeline() is None
