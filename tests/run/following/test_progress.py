"""The run's per-rank view model: synthetic events with known answers, and real recordings."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from ddptui.run.following.events import (
    CheckpointEvent,
    DoneEvent,
    ErrorEvent,
    EventReader,
    RankEvent,
    StartEvent,
    StepEvent,
    StopRequestedEvent,
)
from ddptui.run.following.progress import (
    LOSS_POINTS,
    MAX_RANKS,
    STRAGGLER_EVENTS,
    RankState,
    RunProgress,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "events"
HOSTS = ["gpu-a", "gpu-a", "gpu-b", "gpu-b"]


def _ids(rank: int, world: int = 4) -> dict[str, Any]:
    return {"rank": rank, "local_rank": rank % 2, "node_rank": rank // 2, "world_size": world}


def start(rank: int, time: float = 0.0, start_step: int = 0, total: int = 400) -> StartEvent:
    return StartEvent(**_ids(rank), time=time, total_steps=total, start_step=start_step)


def step(rank: int, n: int, time: float, **values: Any) -> StepEvent:
    fields: dict[str, Any] = {"loss": 1.0, "step_time_s": 0.05, "samples_per_s": 640.0}
    return StepEvent(**_ids(rank), time=time, step=n, **{**fields, **values})


def _run_with_ranks(world: int = 4) -> RunProgress:
    run = RunProgress()
    for rank in range(world):
        run.apply(HOSTS[rank], start(rank))
    return run


def test_the_summary_line_folds_every_rank() -> None:
    run = _run_with_ranks()
    values = [
        (120, 0.034, 0.041, 1204.0),
        (121, 0.031, 0.040, 1100.0),
        (121, 0.040, 0.052, 1180.0),
        (122, 0.036, 0.045, 990.0),
    ]
    for rank, (n, loss, step_time, peak) in enumerate(values):
        run.apply(
            HOSTS[rank],
            step(
                rank,
                n,
                10.0,
                loss=loss,
                step_time_s=step_time,
                samples_per_s=577.5,
                cuda_peak_mib=peak,
            ),
        )
    summary = run.summary()
    assert summary.step == 120 and summary.total_steps == 400
    assert (summary.loss_min, summary.loss_max) == (0.031, 0.040)
    assert summary.loss_median == pytest.approx(0.035)
    assert summary.slowest_rank == 2 and summary.peak_memory_mib == 1204.0
    assert run.format_line() == (
        "step 120/400  loss 0.031 / 0.035 / 0.04  2,310 samples/s  slowest rank 2 (0.052 s)"
        "  peak mem 1,204 MiB"
    )
    assert [p.host for p in run.ranks] == HOSTS and [p.rank for p in run.ranks] == [0, 1, 2, 3]


def test_a_cpu_run_shows_resident_memory_and_a_missing_loss() -> None:
    run = _run_with_ranks(2)
    run.apply("a", step(0, 5, 1.0, rss_mib=300.4, loss=None))
    run.apply("a", step(1, 5, 1.0, rss_mib=310.6, loss=2.0))
    summary = run.summary()
    assert summary.memory_kind == "cpu" and summary.peak_memory_mib == 310.6
    assert summary.nonfinite_ranks == (0,) and summary.loss_min == summary.loss_max == 2.0
    line = run.format_line()
    assert "loss 2 / 2 / 2" in line and "loss not finite on rank 0" in line
    assert "max RSS 311 MiB" in line


def test_before_any_step_the_line_says_who_has_reported() -> None:
    run = RunProgress()
    run.expect("gpu-b", node_rank=1, local_rank=0, rank=2)
    run.apply("gpu-a", start(0))
    assert [p.state for p in run.ranks] == [RankState.STARTING, RankState.STARTING]
    assert run.format_line() == "starting (1 of 4 ranks started)  step 0/400"


def test_states_follow_the_events_through_stop_and_resume() -> None:
    run = RunProgress()
    run.apply("gpu-a", start(0))
    rank = run.rank(0)
    assert rank is not None and rank.state is RankState.STARTING
    for n in range(1, 11):
        run.apply("gpu-a", step(0, n, float(n), loss=10.0 - n))
    assert rank.state is RankState.RUNNING and rank.step == 10
    run.apply("gpu-a", StopRequestedEvent(**_ids(0), time=11.0, step=10, source="control/stop"))
    assert rank.state is RankState.STOPPING
    run.apply("gpu-a", CheckpointEvent(**_ids(0), time=11.5, step=8, path="c.pt"))
    run.apply("gpu-a", DoneEvent(**_ids(0), time=12.0, step=10, reason="stopped"))
    assert rank.state is RankState.STOPPED and rank.last_checkpoint_step == 8
    assert "1 stopped" in run.format_line()

    # A resume from the checkpoint at step 8 takes steps 9 and 10 again: their new losses win.
    run.apply("gpu-a", start(0, time=20.0, start_step=8))
    assert rank.state is RankState.STARTING and rank.step == 8
    assert [s for s, _ in rank.losses] == list(range(1, 9))
    for n in (9, 10, 11):
        run.apply("gpu-a", step(0, n, 20.0 + n, loss=0.5))
    assert [s for s, _ in rank.losses] == list(range(1, 12)) and rank.losses[-1] == (11, 0.5)
    run.apply("gpu-a", DoneEvent(**_ids(0), time=40.0, step=400, reason="completed"))
    assert rank.state is RankState.DONE and rank.step == 400


def test_an_error_event_fails_the_rank_with_its_message() -> None:
    run = _run_with_ranks(2)
    run.apply("gpu-a", step(1, 3, 1.0))
    run.apply("gpu-a", ErrorEvent(**_ids(1), time=2.0, message="RuntimeError: boom"))
    failed = run.rank(1)
    assert (
        failed is not None
        and failed.state is RankState.FAILED
        and failed.error == "RuntimeError: boom"
    )
    assert "1 failed" in run.format_line()


def test_the_loss_curve_stays_bounded_and_keeps_its_shape() -> None:
    run = _run_with_ranks(1)
    for n in range(1, 100_001):
        run.apply("a", step(0, n, float(n), loss=1.0 / n))
    rank = run.rank(0)
    assert rank is not None
    steps = [s for s, _ in rank.losses]
    assert LOSS_POINTS // 2 <= len(steps) <= LOSS_POINTS
    assert steps[0] == 1 and steps[-1] > 99_000 and steps == sorted(set(steps))
    # Evenly thinned: the gaps between kept steps are the current stride, at most two strides.
    gaps = {b - a for a, b in itertools.pairwise(steps)}
    assert max(gaps) <= 2 * rank.loss_stride and rank.loss_stride >= 100_000 // LOSS_POINTS
    assert all(loss == 1.0 / s for s, loss in rank.losses)


def test_all_ranks_curves_together_stay_bounded_at_a_large_clusters_size() -> None:
    sizes = {}
    for world in (4, 256, 1024, 16384):
        run = RunProgress()
        run.world_size = world
        created = run.expect("a", 0, 0, 0)
        assert created is not None
        sizes[world] = created.losses.maxlen
    assert sizes == {4: LOSS_POINTS, 256: LOSS_POINTS, 1024: 256, 16384: 64}


def test_a_rank_keeps_its_latest_work_per_step_and_no_more_within_an_attempt() -> None:
    """The numbers judging names stragglers by (supervisor/judging.py): bounded, this
    attempt's only, none once the rank ended."""
    run = _run_with_ranks(2)
    for n in range(1, 3 * STRAGGLER_EVENTS):
        run.apply(HOSTS[0], step(0, n, 1000.0 + n, compute_s=n / 1000))
        run.apply(HOSTS[1], step(1, n, 1000.0 + n, step_time_s=0.25))
    ranks = run.ranks
    assert list(ranks[0].paces) == [
        n / 1000 for n in range(2 * STRAGGLER_EVENTS, 3 * STRAGGLER_EVENTS)
    ]
    assert ranks[0].recent_pace == pytest.approx(sum(ranks[0].paces) / STRAGGLER_EVENTS)
    # Without its own work a rank's step time stands for it.
    assert set(ranks[1].paces) == {0.25} and len(ranks[1].paces) == STRAGGLER_EVENTS
    run.apply(HOSTS[0], start(0, time=2000.0, start_step=50))
    assert not ranks[0].paces and ranks[0].recent_pace is None
    run.apply(HOSTS[1], DoneEvent(**_ids(1), time=2000.0, step=60, reason="completed"))
    assert not ranks[1].paces


def test_a_host_inventing_ranks_cannot_grow_the_model_without_bound() -> None:
    run = RunProgress()
    for rank in range(MAX_RANKS + 10):
        event = StepEvent(rank=rank, local_rank=0, node_rank=0, world_size=2**40, time=1.0, step=1)
        run.apply("liar", event)
    assert len(run.ranks) == MAX_RANKS and run.ignored == 10


def _replay(name: str) -> RunProgress:
    run, reader = RunProgress(), EventReader()
    for line in (FIXTURES / name).read_bytes().splitlines():
        event = reader.feed(line)
        assert event is not None
        run.apply("vm", event)
    return run


def test_a_recorded_gpu_run_replays_to_its_end() -> None:
    run = _replay("bf16-300-steps.rank0.jsonl")
    (rank,) = run.ranks
    assert rank.state is RankState.DONE and rank.step == 300 and rank.host == "vm"
    assert len(rank.losses) == 300 and rank.losses[0][1] > 10 * rank.losses[-1][1]
    summary = run.summary()
    assert summary.memory_kind == "gpu" and summary.peak_memory_mib is not None
    assert summary.peak_memory_mib >= rank.cuda_allocated_mib  # type: ignore[operator]
    assert run.format_line().startswith("step 300/300  loss ")
    assert run.format_line().endswith("1 done")


def test_a_recorded_resumed_run_keeps_one_loss_per_step() -> None:
    run = _replay("fsdp-resumed.rank0.jsonl")
    (rank,) = run.ranks
    assert rank.state is RankState.DONE and rank.step == 200 and rank.total_steps == 200
    assert [s for s, _ in rank.losses] == list(range(1, 201))


def test_a_recorded_error_fails_the_rank() -> None:
    run = _replay("nccl-error.rank0.jsonl")
    assert run.ranks[0].state is RankState.FAILED
    assert (run.ranks[0].error or "").startswith("DistBackendError")


def _replay_run(events: list[RankEvent]) -> RunProgress:
    run = RunProgress()
    for event in events:
        run.apply("this-host", event)
    return run


@pytest.mark.slow
def test_real_cpu_runs_end_in_their_states(cpu_events: dict[str, list[RankEvent]]) -> None:
    completed = _replay_run(cpu_events["completed"])
    (rank,) = completed.ranks
    assert rank.state is RankState.DONE and rank.last_checkpoint_step == 30
    assert [s for s, _ in rank.losses] == list(range(1, 31))
    assert rank.losses[-1][1] < rank.losses[0][1]
    line = completed.format_line()
    assert line.startswith("step 30/30  loss ") and "max RSS" in line and line.endswith("1 done")

    assert _replay_run(cpu_events["stopped"]).ranks[0].state is RankState.STOPPED
    assert _replay_run(cpu_events["failed"]).ranks[0].state is RankState.FAILED
    diverged = _replay_run(cpu_events["diverged"])
    assert diverged.summary().nonfinite_ranks == (0,)
    assert [s for s, _ in diverged.ranks[0].losses] == [1], "NaN steps are not on the curve"
