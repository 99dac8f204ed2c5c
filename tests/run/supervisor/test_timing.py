"""The supervisor's launch timing: backend stamps wait for the record's next change, the
ranks' stages come from the model, and the summary is said once, of the attempt it started."""

from __future__ import annotations

from ddptui.run.following.model import RunModel
from ddptui.run.following.nccl_init import NcclInit
from ddptui.run.following.updates import FileLine
from ddptui.run.record import Attempt, RunRecord
from ddptui.run.supervisor.timing import LaunchTiming
from ddptui.run.timeline import Timeline
from tests.run.bed import two_host_record


class _Wall:
    def __init__(self) -> None:
        self.now = 2000.0

    def __call__(self) -> float:
        return self.now


def _whole(attempt: int, began: float) -> Timeline:
    stamps = {"started": began + 1.0, "first_step": began + 5.0}
    return Timeline(attempt, began, {"a": dict(stamps), "b": dict(stamps)})


def test_stamps_wait_for_the_record_s_next_change_and_a_resume_gets_a_timeline() -> None:
    wall = _Wall()
    timing = LaunchTiming(wall)
    record = two_host_record()
    timing.reached("a", "staged")
    assert record.timelines == []  # nothing begun: nothing kept
    timing.begin(2)
    wall.now += 0.5
    timing.reached("a", "started")
    assert record.timelines == []
    timing.applied(lambda changed: None)(record)
    (timeline,) = record.timelines
    assert (timeline.attempt, timeline.began) == (2, 2000.0)
    assert timeline.hosts == {"a": {"started": 2000.5}}


def test_a_resume_s_timeline_starts_when_it_was_asked_for_if_that_was_lately() -> None:
    for asked_at, began in ((1990.0, 1990.0), (2000.0 - 301.0, 2000.0), (2005.0, 2000.0)):
        wall = _Wall()
        timing = LaunchTiming(wall)
        record = two_host_record()
        timing.begin(2, asked_at=asked_at)
        timing.reached("a", "checking")
        timing.applied(lambda changed: None)(record)
        (timeline,) = record.timelines
        # A request's time is the viewer's word: too long ago, or to come, it is now.
        assert timeline.began == began
        assert timeline.hosts == {"a": {"checking": 2000.0}}


def test_the_summary_is_of_the_attempt_it_started_and_said_once() -> None:
    timing = LaunchTiming(_Wall())
    record = two_host_record()
    # Attempt 1's launch, whole, summed up by the supervisor that started it; this one is
    # starting attempt 2, not recorded yet.
    record.timelines = [_whole(1, 1000.0)]
    timing.begin(2)
    assert timing.summary(record) is None
    record.attempts.append(Attempt(2, 1900.0, 29500))
    assert timing.summary(record) is None
    record.timelines.append(_whole(2, 1900.0))
    assert timing.summary(record) == (
        "first step in 5.0 s; slowest: b, 4.0 s torchrun starting the ranks … the first step"
    )
    assert timing.summary(record) is None


def test_an_adopted_run_s_timeline_is_not_summed_up_again() -> None:
    record: RunRecord = two_host_record()
    record.timelines = [_whole(1, 1000.0)]
    timing = LaunchTiming(_Wall())
    assert timing.observe(record, RunModel(record)) is False
    assert timing.summary(record) is None


def test_nccl_s_init_timing_the_model_read_reaches_the_record_with_its_next_change() -> None:
    record = two_host_record()
    record.timelines = [Timeline(1, 1000.0, {"a": {"started": 1001.0}})]
    model = RunModel(record)
    line = (
        "NCCL INFO Init timings - ncclCommInitRankConfig: rank 0 nranks 4 total 2.5 (bootstrap 2.4)"
    )
    model.apply(FileLine("b", "logs/attempt-1/x_y/attempt_0/1/stdout.log", 1, line))
    timing = LaunchTiming(_Wall())
    assert timing.observe(record, model) is True
    assert record.timelines[0].nccl == {}
    timing.applied(lambda changed: None)(record)
    assert record.timelines[0].nccl == {"b": NcclInit(3, 2.5, (("bootstrap", 2.4),))}
    # Taken once: nothing waits for the next change.
    assert timing.observe(record, model) is False
