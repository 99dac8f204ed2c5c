"""Crash-only, not crash-loop: a line the supervisor cannot take, or a state its judging
cannot judge, is set aside and said, and the run goes on being judged — and a new supervisor,
replaying the journal, skips what the last one set aside instead of meeting it again.

No value a host can send is known to fault today (each one found was fixed at its boundary),
so the fault is a bug put into the real code for the test: any line that carries ``POISON``.
Everything else is the real supervisor on in-memory hosts (fast tier)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from ddptui.run.following.events import EventReader, RankEvent
from ddptui.run.record import RunState
from ddptui.run.store import RunStore
from ddptui.run.supervisor import judging
from ddptui.run.supervisor.following import JUDGE_EVERY_S
from ddptui.run.supervisor.jobs import Launch
from tests.run.supervisor.fake_backend import Bed, FakeHost, Viewer, config, new_record

POISON = "POISON"


def _poison_line(host: FakeHost, rank: int) -> None:
    """An event of ``rank`` that the patched reader faults on: a phase, which the supervisor
    reads as it comes (its step events wait for judging), on replay too."""
    document = {"v": 1, "type": "phase", "rank": rank, "local_rank": rank - 2 * host.node_rank}
    document.update({"node_rank": host.node_rank, "world_size": 4, "time": time.time()})
    host._line(f"events/rank{rank}.jsonl", json.dumps({**document, "phase": POISON}))


@pytest.fixture
def faulting_reader(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every line the reader was handed that carries the poison, as it faults on it."""
    met: list[str] = []
    feed = EventReader.feed

    def faulting(self: EventReader, text: str) -> RankEvent | None:
        if POISON in text:
            met.append(text)
            raise OSError("a bug met a host's value")
        return feed(self, text)

    monkeypatch.setattr(EventReader, "feed", faulting)
    return met


def _bed(root: Path) -> Bed:
    store = RunStore(root)
    return Bed(store.root, new_record(store, attempts=0, state=RunState.STAGING), config())


def test_a_poisoned_line_is_set_aside_and_a_new_supervisor_skips_it(
    tmp_path: Path, faulting_reader: list[str]
) -> None:
    asyncio.run(asyncio.wait_for(_poisoned_line(tmp_path, faulting_reader), 60.0))


async def _poisoned_line(tmp_path: Path, faulting_reader: list[str]) -> None:
    first = _bed(tmp_path / "runs")
    first.serve(Launch())
    await first.until_state(RunState.RUNNING)
    hosts = first.backend.hosts
    for host in hosts.values():
        host.step(1)
    _poison_line(hosts["b"], 3)
    await first.until(lambda: "set aside" in first.record.attempt.detail)
    detail = first.record.attempt.detail
    assert "b (events/rank3.jsonl" in detail and "OSError: a bug met a host's value" in detail
    # Still following and judging: the next steps are taken.
    for host in hosts.values():
        host.step(3)
    await first.until(lambda: first.supervisor.following.model.progress.rank(0).step == 3)  # type: ignore[union-attr]
    assert first.supervisor.following.active
    assert len(faulting_reader) == 1

    # The supervisor goes (as at a crash or SIGTERM); the run lives on, found by another.
    assert first.task is not None
    first.task.cancel()
    await asyncio.wait_for(first.task, 30.0)
    second = Bed(first.store.root, first.store.load(first.record.id), config())
    for name, host in second.backend.hosts.items():
        host.offset, host.attempt, host.alive = hosts[name].offset, 1, {1: True}
    second.serve(None)
    await second.until(lambda: second.supervisor.following.active)
    viewer = await Viewer.attach(second.supervisor)
    await second.until(lambda: second.supervisor.following.model.progress.rank(2).step == 3)  # type: ignore[union-attr]
    # The journal's poisoned line was skipped, not met again.
    assert len(faulting_reader) == 1

    # Still judged: a silence past the hang window is a hang.
    second.clock.jump(3600.0)
    await second.until_state(RunState.HUNG)
    # And stoppable.
    reply = await viewer.ask("stop")
    assert reply.ok, reply.message
    await second.finish()
    assert second.record.state is RunState.STOPPED


def test_a_fault_in_judging_is_said_once_and_judging_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(asyncio.wait_for(_faulting_judge(tmp_path, monkeypatch), 60.0))


async def _faulting_judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    judge = judging.judge
    calls = {"faulted": 0}

    def faulting(model, state, job):  # type: ignore[no-untyped-def]
        progress = model.progress.rank(2)
        if progress is not None and progress.loss == -1.0:
            calls["faulted"] += 1
            raise OSError("a bug met a host's value")
        return judge(model, state, job)

    monkeypatch.setattr(judging, "judge", faulting)
    bed = _bed(tmp_path / "runs")
    bed.serve(Launch())
    await bed.until_state(RunState.RUNNING)
    hosts = bed.backend.hosts
    hosts["a"].step(1)
    hosts["b"]._event("step", 2, step=1, loss=-1.0, step_time_s=0.01)
    hosts["b"]._event("step", 3, step=1, loss=1.0, step_time_s=0.01)
    await bed.until(lambda: calls["faulted"] >= 3, timeout=10 * JUDGE_EVERY_S + 20)
    detail = bed.record.attempt.detail
    assert detail.count("set aside: judging failed: OSError: a bug met a host's value") == 1
    assert "b" in detail.split("after lines from ")[1]
    # The value goes (the rank steps on): judging judges again, and sees the run end.
    for host in hosts.values():
        host.step(2)
        host.exit(0)
    await bed.finish()
    assert bed.record.state is RunState.COMPLETED
