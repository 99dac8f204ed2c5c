"""Builders for tests of RunModel and of judging: the lines a two-host run's hosts send
(:func:`~tests.run.bed.two_host_record`'s hosts a and b, ranks 0-1 and 2-3), a clock a test
moves by hand, and judging's verdict where one must be."""

from __future__ import annotations

import json

from ddptui.run.following.model import RunModel
from ddptui.run.following.state import Verdict
from ddptui.run.following.updates import FileLine, Heartbeat
from ddptui.run.supervisor import ending


class Clock:
    """The model's clock (and wall clock), moved by hand: ``clock.now += 3.0``."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def event_json(kind: str, rank: int, **fields: object) -> str:
    common = {"v": 1, "type": kind, "rank": rank, "local_rank": rank % 2}
    common.update({"node_rank": rank // 2, "world_size": 4, "time": 100.0 + rank})
    return json.dumps({**common, **fields})


def exit_line(host: str, status: int, attempt: int = 1) -> FileLine:
    return FileLine(host, f"node/attempt-{attempt}.exit", 2, str(status))


def step_line(host: str, rank: int, step: int, step_time_s: float = 0.1) -> FileLine:
    line = event_json("step", rank, step=step, loss=1.0, step_time_s=step_time_s)
    return FileLine(host, f"events/rank{rank}.jsonl", step, line)


def started(model: RunModel) -> RunModel:
    """Every rank's start event, as each attempt of the trainer writes first."""
    for rank in range(4):
        line = event_json("start", rank, start_step=0)
        model.apply(FileLine("ab"[rank // 2], f"events/rank{rank}.jsonl", 1, line))
    return model


def beat(host: str, clock: Clock, ranks: dict[int, tuple[str, float]]) -> Heartbeat:
    sample = {"ranks": {rank: {"state": s, "cpu_pct": cpu} for rank, (s, cpu) in ranks.items()}}
    return Heartbeat(host, clock.now, {1: True}, sample)


def verdict_of(model: RunModel) -> Verdict:
    """Judging's verdict now, which there must be."""
    verdict = ending.verdict(model)
    assert verdict is not None
    return verdict
