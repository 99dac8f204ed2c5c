"""The real supervisor, driven through every phase move by in-memory hosts (fast tier).

Each scenario is what a user lives through — a run that completes, fails, hangs, is stopped,
is found live by a new supervisor, is ended or requeued by a scheduler — and checks the
phases the supervisor went through, what it recorded and what a viewer on its socket was
told. Together they walk every move of :data:`~ddptui.run.supervisor.phase.MOVES`."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from ddptui.config.model import RecoveryConfig
from ddptui.run.backends import NodesEnded, Restarted, StartFailed
from ddptui.run.following.updates import FileLine
from ddptui.run.protocol import Ended, Reply, Said
from ddptui.run.record import RunState
from ddptui.run.store import RunStore
from ddptui.run.supervisor import following, healing
from ddptui.run.supervisor.jobs import Launch, Resume
from ddptui.run.supervisor.phase import MOVES, Phase, PhaseError, Phases
from tests.run.supervisor.fake_backend import Bed, Viewer, config, new_record

IDL, STA, RUN, CON, STO = "idle", "starting", "running", "concluding", "stopping"
REC = "recovering"
Scenario = Callable[[Path], Awaitable[list[tuple[str, str]]]]
SCENARIOS: dict[str, tuple[Scenario, list[tuple[str, str]]]] = {}


def scenario(*moves: tuple[str, str]) -> Callable[[Scenario], Scenario]:
    def register(walk: Scenario) -> Scenario:
        SCENARIOS[walk.__name__] = (walk, list(moves))
        return walk

    return register


@pytest.fixture(autouse=True)
def _sweep_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host set aside is tried again at once, not every 15 s: a supervisor waits for its
    leftovers to be ended before it exits."""
    monkeypatch.setattr(healing, "LEFTOVERS_EVERY_S", 0.05)


def _bed(
    tmp_path: Path,
    *,
    attempts: int = 0,
    state: RunState = RunState.STAGING,
    recovery: RecoveryConfig | None = None,
    **job: object,
) -> Bed:
    store = RunStore(tmp_path / "runs")
    record = new_record(store, attempts=attempts, state=state)
    return Bed(store.root, record, config(recovery=recovery, **job))


async def _launched(bed: Bed) -> Viewer:
    """A new run's supervisor, started to launch it, and a viewer attached."""
    bed.serve(Launch())
    viewer = await Viewer.attach(bed.supervisor)
    await bed.until_state(RunState.RUNNING)
    return viewer


@scenario((IDL, STA), (STA, RUN), (RUN, CON), (CON, IDL))
async def launch_steps_and_completes(tmp_path: Path) -> list[tuple[str, str]]:
    bed = _bed(tmp_path)
    viewer = await _launched(bed)
    for step in (1, 2, 3):
        for host in bed.backend.hosts.values():
            host.step(step)
    for host in bed.backend.hosts.values():
        host.exit(0)
    ended = await viewer.until(lambda item: isinstance(item, Ended))
    assert isinstance(ended, Ended) and ended.state is RunState.COMPLETED
    await bed.finish()
    record = bed.record
    assert record.state is RunState.COMPLETED and record.attempt.outcome == "completed"
    # Every journal line kept: each host's two start and six step events and its exit.
    assert len(list(bed.supervisor.journal.lines())) == 2 * (2 + 6 + 1)
    return bed.moves


@scenario((IDL, STA), (STA, IDL))
async def a_start_that_fails_before_any_node_runs(tmp_path: Path) -> list[tuple[str, str]]:
    bed = _bed(tmp_path)
    bed.backend.refuse = StartFailed("port 29500 is taken on a", end=RunState.FAILED)
    bed.serve(Launch())
    await bed.finish()
    assert bed.record.state is RunState.FAILED
    assert bed.record.detail == "port 29500 is taken on a"
    return bed.moves


@scenario((IDL, STA), (STA, IDL))
async def a_refused_resume_records_nothing(tmp_path: Path) -> list[tuple[str, str]]:
    bed = _bed(tmp_path, attempts=1, state=RunState.FAILED)
    bed.backend.refuse = StartFailed("cannot resume: b cannot be reached", data={"exit_code": 3})
    bed.serve(None)
    viewer = await Viewer.attach(bed.supervisor)
    reply = await viewer.ask("resume")
    assert not reply.ok and reply.message == "cannot resume: b cannot be reached"
    assert reply.data == {"exit_code": 3}
    await bed.finish()
    assert bed.record.state is RunState.FAILED and len(bed.record.attempts) == 1
    return bed.moves


@scenario((IDL, STA), (STA, RUN), (RUN, CON), (CON, IDL))
async def a_start_that_fails_on_followed_nodes(tmp_path: Path) -> list[tuple[str, str]]:
    bed = _bed(tmp_path)
    bed.backend.fail_running = StartFailed("node b: driver 535 < 550", end=RunState.FAILED)
    bed.serve(Launch())
    await bed.finish()
    assert bed.record.state is RunState.FAILED and bed.record.detail == "node b: driver 535 < 550"
    assert "terminate skip=[]" in bed.backend.asked
    return bed.moves


@scenario((IDL, STA), (STA, RUN), (RUN, CON), (CON, IDL))
async def a_rank_fails_and_the_others_are_ended(tmp_path: Path) -> list[tuple[str, str]]:
    bed = _bed(tmp_path)
    viewer = await _launched(bed)
    for host in bed.backend.hosts.values():
        host.step(1)
    bed.backend.hosts["b"].exit(1)
    await bed.until(lambda: bed.supervisor.following.model.nodes["b"].exit == 1)
    # A root cause may be a moment behind the exit: nothing is judged before it settles.
    assert bed.supervisor.phases.now is Phase.RUNNING
    bed.clock.jump(5.0)
    ended = await viewer.until(lambda item: isinstance(item, Ended))
    assert isinstance(ended, Ended) and ended.state is RunState.FAILED
    assert ended.detail == "torchrun on b (node 1) exited 1"
    # The others are ended, and the flight recorders looked for, after the verdict is recorded.
    assert bed.backend.asked.index("terminate skip=[]") < bed.backend.asked.index("stacks")
    await bed.finish()
    return bed.moves


@scenario((IDL, STA), (STA, RUN), (RUN, CON), (CON, IDL))
async def a_host_that_stops_answering_fails_the_run(tmp_path: Path) -> list[tuple[str, str]]:
    bed = _bed(tmp_path)
    await _launched(bed)
    bed.backend.hosts["b"].cut()
    await bed.until_state(RunState.FAILED)
    assert "b (node 1) stopped answering" in bed.record.detail
    # The silent host is not asked (each would cost a connect timeout): what answers is
    # ended, and its flight recorders read.
    await bed.until(lambda: "stacks skip=['b']" in bed.backend.asked)
    assert "terminate skip=['b']" in bed.backend.asked
    await bed.finish()
    return bed.moves


@scenario(
    *((IDL, STA), (STA, RUN), (RUN, CON), (CON, IDL)),
    *((IDL, REC), (REC, STA), (STA, RUN), (RUN, CON), (CON, IDL)),
    *((IDL, STA), (STA, RUN), (RUN, CON), (CON, IDL)),
)
async def a_lost_host_is_replaced_by_the_spare_and_the_run_completes(
    tmp_path: Path,
) -> list[tuple[str, str]]:
    bed = _bed(tmp_path, recovery=RecoveryConfig(mode="resume"))
    viewer = await _launched(bed)
    for host in bed.backend.hosts.values():
        host.step(1)
    bed.backend.hosts["b"].cut()
    # Viewers are told the attempt ended with recovery to decide: they go on following.
    ended = await viewer.until(lambda item: isinstance(item, Ended))
    assert ended == Ended(RunState.FAILED, bed.record.attempts[0].detail, 1, recovering=True)
    await bed.until(lambda: len(bed.record.attempts) == 2 and bed.record.state is RunState.RUNNING)
    record = bed.record
    assert [node.host for node in record.nodes] == ["a", "c"]
    (incident,) = record.incidents
    assert (incident.blamed, incident.resumed_attempt) == (("b",), 2), incident
    assert incident.action == "resuming on c in place of b" and incident.last_step == 1
    assert "b stopped answering" in incident.why
    # Dated by the evidence: b was last heard from after the step, before it was judged lost.
    assert incident.last_step_at is not None and incident.fault_at is not None
    assert incident.last_step_at <= incident.fault_at <= incident.detected_at
    # Recorded as soon as the attempt was judged failed, not once the others were ended.
    failed_at = next(change.time for change in record.states if change.state is RunState.FAILED)
    assert incident.detected_at == failed_at
    assert incident.step_s == 0.01
    assert [aside.host for aside in record.set_aside] == ["b"]
    assert "replace {'b': 'c'}" in bed.backend.asked and "start 2 resume" in bed.backend.asked
    for host in bed.backend.hosts.values():
        host.step(2)
    for host in bed.backend.hosts.values():
        host.exit(0)
    await bed.until_state(RunState.COMPLETED)
    # A resume takes back only a host set aside: b (a spare again), not a.
    viewer = await Viewer.attach(bed.supervisor)
    refused = await viewer.ask("resume", bring_back=("a",))
    assert not refused.ok and refused.message == (
        f"run {record.id}: a not set aside, so there is nothing to take back (set aside: b)"
    )
    taken = await viewer.ask("resume", bring_back=("b",))
    assert taken.ok, taken
    await bed.until(lambda: len(bed.record.attempts) == 3)
    assert bed.record.set_aside == []
    for host in bed.backend.hosts.values():
        host.exit(0)
    await bed.finish()
    assert bed.record.state is RunState.COMPLETED
    return bed.moves


@scenario(
    *((IDL, STA), (STA, RUN), (RUN, CON), (CON, IDL)),
    *((IDL, REC), (REC, STA), (STA, RUN), (RUN, CON), (CON, IDL)),
)
async def with_no_spare_left_a_lost_host_s_run_goes_on_with_fewer_nodes(
    tmp_path: Path,
) -> list[tuple[str, str]]:
    with_spare = config(recovery=RecoveryConfig(mode="resume", min_nodes=1))
    store = RunStore(tmp_path / "runs")
    record = new_record(store, attempts=0, state=RunState.STAGING)
    without = dataclasses.replace(with_spare, hosts=with_spare.ordered_hosts)
    bed = Bed(store.root, record, without)
    await _launched(bed)
    for host in bed.backend.hosts.values():
        host.step(1)
    bed.backend.hosts["b"].cut()
    await bed.until(lambda: len(bed.record.attempts) == 2 and bed.record.state is RunState.RUNNING)
    record = bed.record
    assert [(node.host, node.node_rank) for node in record.nodes] == [("a", 0)]
    assert record.world_size == 2
    (incident,) = record.incidents
    assert incident.action == "resuming on 1 node(s), without b", incident
    assert [aside.host for aside in record.set_aside] == ["b"]
    assert "replace {} without ['b']" in bed.backend.asked
    # The ranks b ran are gone from the run: none is waited for, none judged as not started.
    assert [rank.rank for rank in bed.supervisor.following.model.progress.ranks] == [0, 1]
    bed.backend.hosts["a"].step(2)
    bed.backend.hosts["a"].exit(0)
    # b answers again: the supervisor ends what the run left there, and then exits.
    bed.backend.set_aside["b"].back()
    await bed.finish()
    assert bed.record.state is RunState.COMPLETED
    return bed.moves


@scenario((IDL, STA), (STA, RUN), (RUN, CON), (CON, IDL), (IDL, REC), (REC, IDL))
async def a_failure_no_host_is_blamed_for_is_not_recovered(
    tmp_path: Path,
) -> list[tuple[str, str]]:
    bed = _bed(tmp_path, recovery=RecoveryConfig(mode="resume"))
    viewer = await _launched(bed)
    bed.backend.hosts["b"].exit(1)
    bed.clock.jump(5.0)
    await bed.until(lambda: bool(bed.record.incidents))
    # Recovery gave up: a last word for viewers, and following is over.
    final = await viewer.until(lambda item: isinstance(item, Ended) and not item.recovering)
    first, last = [item for item in viewer.told if isinstance(item, Ended)]
    assert first == Ended(RunState.FAILED, "torchrun on b (node 1) exited 1", 1, recovering=True)
    assert last is final and final.detail == "torchrun on b (node 1) exited 1"
    said = [item.line for item in viewer.told if isinstance(item, Said)]
    assert any(line.startswith("not recovered: no host is to blame") for line in said), said
    await bed.finish()
    record = bed.record
    assert record.state is RunState.FAILED and len(record.attempts) == 1
    (incident,) = record.incidents
    assert incident.blamed == () and incident.resumed_attempt is None
    assert incident.action.startswith("not recovered: no host is to blame"), incident
    assert record.set_aside == [] and not any("replace" in asked for asked in bed.backend.asked)
    return bed.moves


@scenario((IDL, STA), (STA, RUN), (RUN, STO), (STO, IDL))
async def a_stop_checkpoints_first(tmp_path: Path) -> list[tuple[str, str]]:
    bed = _bed(tmp_path)
    viewer = await _launched(bed)
    for host in bed.backend.hosts.values():
        host.step(1)
    reply = await viewer.ask("stop")
    assert reply.ok and "stopped in" in reply.message, reply
    assert "stop kill=False graceful=True" in bed.backend.asked
    await bed.finish()
    assert bed.record.state is RunState.STOPPED and bed.record.detail == "stopped on request"
    return bed.moves


@scenario((IDL, STA), (STA, RUN), (RUN, STO), (STO, IDL))
async def a_hang_is_kept_and_goes_when_the_ranks_step_again(
    tmp_path: Path,
) -> list[tuple[str, str]]:
    bed = _bed(tmp_path, hang_timeout_s=2.0)
    viewer = await _launched(bed)
    await bed.hang()
    await bed.until(lambda: "every rank's stacks at the hang" in bed.record.attempt.detail)
    assert len(list(bed.supervisor.files.evidence.glob("hang-*.json"))) == 1
    for host in bed.backend.hosts.values():
        host.step(3)
    await bed.until_state(RunState.RUNNING)
    assert bed.record.detail == "stepping again"
    reply = await viewer.ask("kill")
    assert reply.ok and "stop kill=True graceful=True" in bed.backend.asked
    await bed.finish()
    assert bed.record.detail == "killed"
    return bed.moves


@scenario((IDL, STA), (STA, RUN), (RUN, STO), (STO, IDL))
async def on_hang_stop_ends_a_hung_run(tmp_path: Path) -> list[tuple[str, str]]:
    bed = _bed(tmp_path, hang_timeout_s=2.0, on_hang="stop")
    viewer = await _launched(bed)
    await bed.hang()
    ended = await viewer.until(lambda item: isinstance(item, Ended))
    assert isinstance(ended, Ended) and ended.state is RunState.FAILED
    assert ended.detail.startswith("hung at step 2: no step for")
    assert "every rank's stacks at the hang" in ended.detail
    assert bed.backend.asked.index("stacks") < bed.backend.asked.index("terminate skip=[]")
    await bed.finish()
    return bed.moves


@scenario((IDL, STA), (STA, RUN), (RUN, CON), (CON, STO), (STO, IDL))
async def a_stop_asked_before_a_verdict_wins(tmp_path: Path) -> list[tuple[str, str]]:
    bed = _bed(tmp_path, hang_timeout_s=2.0)
    viewer = await _launched(bed)
    bed.backend.stacks_gate.clear()
    await bed.hang()
    # While the hang's stacks are taken, a stop is asked, then the ranks end.
    stop = viewer.send("stop")
    await viewer.until(lambda item: isinstance(item, Said) and "queued behind" in item.line)
    for host in bed.backend.hosts.values():
        host.exit(0)
    await bed.until(lambda: bed.supervisor.phases.now is Phase.CONCLUDING)
    bed.backend.stacks_gate.set()
    reply = await viewer.until(lambda item: isinstance(item, Reply) and item.id == stop)
    assert isinstance(reply, Reply) and reply.ok
    await bed.finish()
    # The stop was asked first: the run stopped; the verdict behind it found it ended.
    assert bed.record.state is RunState.STOPPED
    return bed.moves


@scenario((IDL, RUN), (RUN, CON), (CON, IDL))
async def a_live_run_found_without_a_supervisor_is_followed(
    tmp_path: Path,
) -> list[tuple[str, str]]:
    bed = _bed(tmp_path, attempts=1, state=RunState.RUNNING)
    for host in bed.backend.hosts.values():
        host.start(1)
    bed.serve(None)
    await bed.until(lambda: bed.supervisor.following.active)
    for host in bed.backend.hosts.values():
        host.exit(0)
    await bed.finish()
    assert bed.record.state is RunState.COMPLETED
    return bed.moves


@scenario((IDL, STA), (STA, IDL))
async def a_start_cut_short_is_ended(tmp_path: Path) -> list[tuple[str, str]]:
    bed = _bed(tmp_path, attempts=1, state=RunState.STARTING)
    bed.serve(None)
    await bed.finish()
    assert bed.record.state is RunState.FAILED
    assert "the start was interrupted" in bed.record.detail
    assert bed.backend.asked[:2] == ["connect", "terminate skip=[]"]
    return bed.moves


@scenario(
    (IDL, STA), (STA, RUN), (RUN, CON), (CON, IDL), (IDL, STA), (STA, RUN), (RUN, CON), (CON, IDL)
)
async def a_scheduler_ends_the_nodes_then_requeues(tmp_path: Path) -> list[tuple[str, str]]:
    bed = _bed(tmp_path)
    await _launched(bed)
    # What a backend found of its job is its own: the supervisor hands it back unread.
    bed.backend.events.put_nowait(NodesEnded("job 41: NODE_FAIL"))
    await bed.until_state(RunState.FAILED)
    assert bed.record.detail == "the scheduler ended the job"
    assert "ended failed" in bed.backend.asked
    # The job lives on in the scheduler's queue: the supervisor waits for it, not exits.
    bed.backend.scheduler_holds = True
    await bed.until_idle_exits()
    assert bed.task is not None and not bed.task.done()
    bed.backend.events.put_nowait(Restarted("job 41: RUNNING again"))
    await bed.until_state(RunState.RUNNING)
    bed.backend.scheduler_holds = False
    assert bed.record.attempt.number == 2 and bed.record.attempt.allocation == "a,b"
    for host in bed.backend.hosts.values():
        host.exit(0)
    await bed.finish()
    assert bed.record.state is RunState.COMPLETED
    return bed.moves


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario(name: str, tmp_path: Path) -> None:
    walk, expected = SCENARIOS[name]
    assert asyncio.run(asyncio.wait_for(walk(tmp_path), 60.0)) == expected


def test_the_scenarios_walk_every_move() -> None:
    walked = {move for _, moves in SCENARIOS.values() for move in moves}
    every = {(a.value, b.value) for a, targets in MOVES.items() for b in targets}
    assert walked == every


def test_a_move_the_machine_does_not_have_is_a_bug() -> None:
    phases = Phases()
    phases.move(Phase.STARTING, "launch")
    with pytest.raises(PhaseError, match="no move from starting to stopping"):
        phases.move(Phase.STOPPING, "stop")


def test_racing_requests_are_queued_or_refused_in_order(tmp_path: Path) -> None:
    async def race() -> None:
        bed = _bed(tmp_path, attempts=1, state=RunState.FAILED)
        gate = asyncio.Event()
        start = bed.backend.start

        async def slow_start(number: int, *, resume: bool, debug: bool) -> StartFailed | None:
            await gate.wait()
            return await start(number, resume=resume, debug=debug)

        bed.backend.start = slow_start  # type: ignore[method-assign]
        bed.serve(None)
        first, second = await Viewer.attach(bed.supervisor), await Viewer.attach(bed.supervisor)
        resume = first.send("resume")
        await bed.until(lambda: bed.supervisor.current is not None)
        refused = await second.ask("resume")
        assert not refused.ok and "attempt 2 is starting already" in refused.message
        second.send("stop")
        said = await second.until(lambda item: isinstance(item, Said))
        assert isinstance(said, Said) and said.line == "stop: queued behind the resume under way"
        # A viewer that goes away changes nothing for the others.
        second.close()
        gate.set()
        resumed = await first.until(lambda item: isinstance(item, Reply) and item.id == resume)
        assert isinstance(resumed, Reply) and resumed.message.endswith("resumed (attempt 2)")
        await bed.until_state(RunState.STOPPED)
        await bed.finish()

    asyncio.run(asyncio.wait_for(race(), 60.0))


def test_a_hang_is_judged_as_its_window_ends_not_at_the_next_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ticks 2 s apart, the ranks' steps taken just after one: the ticks fall 2, 4 and 6 s after
    # them, so a 5 s window judged only at a tick would be said 6 s after the steps.
    monkeypatch.setattr(following, "JUDGE_EVERY_S", 2.0)

    async def judged() -> None:
        bed = _bed(tmp_path, hang_timeout_s=5.0)
        await _launched(bed)
        ticks: list[float] = []
        judge = bed.supervisor.following._judge

        def counted() -> float | None:
            ticks.append(time.monotonic())
            return judge()

        bed.supervisor.following._judge = counted
        await bed.until(lambda: bool(ticks))
        for host in bed.backend.hosts.values():
            host.step(1)
        stepped = time.monotonic()
        await bed.until_state(RunState.HUNG)
        assert time.monotonic() - stepped < 5.5
        for host in bed.backend.hosts.values():
            host.exit(0)
        await bed.finish()

    asyncio.run(asyncio.wait_for(judged(), 60.0))


def test_what_a_quick_launch_said_reaches_its_command_attaching_after_it_in_journal_order(
    tmp_path: Path,
) -> None:
    # A launch's command attaches from the journal's start once the supervisor listens; with
    # a quick staging, the launch may be over by then, and its words must not be lost.
    async def told() -> None:
        bed = _bed(tmp_path)
        bed.serve(Launch())
        await bed.until_state(RunState.RUNNING)
        await bed.until(lambda: bed.supervisor.current is None)
        for host in bed.backend.hosts.values():
            host.step(1)
        journal = bed.supervisor.journal
        await bed.until(lambda: journal.end > 0)
        starter = await Viewer.attach(bed.supervisor, position=0)
        first = await starter.until(lambda item: isinstance(item, (Said, FileLine)))
        assert first == Said("staging attempt 1"), starter.told
        await starter.until(lambda item: isinstance(item, FileLine))
        # A viewer from later on, or from now on, is not told it again.
        for position in (journal.end, None):
            later = await Viewer.attach(bed.supervisor, position=position)
            # Its snapshot's reply comes after whatever it would have been told first.
            await later.ask("snapshot")
            assert not any(isinstance(item, Said) for item in later.told), later.told
            later.close()
        for host in bed.backend.hosts.values():
            host.exit(0)
        await bed.finish()

    asyncio.run(asyncio.wait_for(told(), 60.0))


def test_a_crash_in_following_ends_the_supervisor_loudly(tmp_path: Path) -> None:
    async def crash() -> None:
        bed = _bed(tmp_path)

        def broken(*_: object) -> None:
            raise RuntimeError("a bug in following")

        bed.supervisor.following._judge = broken  # type: ignore[method-assign]
        bed.serve(Launch())
        with pytest.raises(RuntimeError, match="a bug in following"):
            await bed.finish()

    asyncio.run(asyncio.wait_for(crash(), 60.0))


def test_a_resume_of_a_live_run_is_refused(tmp_path: Path) -> None:
    async def refused() -> None:
        bed = _bed(tmp_path)
        viewer = await _launched(bed)
        reply = await viewer.ask("resume")
        assert not reply.ok and "is running; stop it first" in reply.message
        assert bed.supervisor.phases.now is Phase.RUNNING
        await viewer.ask("kill")
        await bed.finish()
        assert bed.supervisor.phases.moves[-1] == (Phase.STOPPING, Phase.IDLE)

    asyncio.run(asyncio.wait_for(refused(), 60.0))


def test_first_jobs_resume_from_the_command_line(tmp_path: Path) -> None:
    async def resumed() -> None:
        bed = _bed(tmp_path, attempts=1, state=RunState.FAILED)
        bed.serve(Resume())
        await bed.until_state(RunState.RUNNING)
        assert bed.backend.asked[:2] == ["connect", "start 2 resume"]
        for host in bed.backend.hosts.values():
            host.exit(0)
        await bed.finish()
        assert bed.record.state is RunState.COMPLETED

    asyncio.run(asyncio.wait_for(resumed(), 60.0))


def test_a_stop_that_arrives_after_a_failure_keeps_the_failure_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    async def late() -> None:
        bed = _bed(tmp_path)
        viewer = await _launched(bed)
        bed.backend.hosts["b"].exit(1)
        bed.clock.jump(5.0)
        await viewer.until(lambda item: isinstance(item, Ended))
        reply = await viewer.ask("stop")
        assert reply.ok and reply.message.endswith("stays failed; nothing of it is left running")
        assert bed.backend.asked[-2] == "stop kill=False graceful=False"
        await bed.finish()
        assert bed.record.state is RunState.FAILED
        assert bed.supervisor.phases.moves[-1] == (Phase.CONCLUDING, Phase.IDLE)

    asyncio.run(asyncio.wait_for(late(), 60.0))


def test_a_notify_that_hangs_does_not_hold_the_recovery_up(tmp_path: Path) -> None:
    async def scenario() -> None:
        hangs = RecoveryConfig(mode="resume", notify=("sleep", "600"))
        bed = _bed(tmp_path, recovery=hangs)
        await _launched(bed)
        bed.backend.hosts["b"].cut()
        await bed.until(
            lambda: len(bed.record.attempts) == 2 and bed.record.state is RunState.RUNNING
        )
        # Resumed on the spare while the command told of it has not answered.
        (incident,) = bed.record.incidents
        assert incident.resumed_attempt == 2 and incident.notified == ""
        assert bed.supervisor.notifying
        for host in bed.backend.hosts.values():
            host.exit(0)
        bed.backend.set_aside["b"].back()
        await bed.finish()

    asyncio.run(scenario())


def test_two_faults_with_max_restarts_1_fail_the_run_listing_both(tmp_path: Path) -> None:
    async def scenario() -> None:
        bed = _bed(tmp_path, recovery=RecoveryConfig(mode="resume", max_restarts=1))
        await _launched(bed)
        for host in bed.backend.hosts.values():
            host.step(1)
        # torchrun killed by a signal, on b and then on the spare that took its place.
        bed.backend.hosts["b"].exit(137)
        bed.clock.jump(5.0)
        await bed.until(
            lambda: len(bed.record.attempts) == 2 and bed.record.state is RunState.RUNNING
        )
        for host in bed.backend.hosts.values():
            host.step(2)
        bed.backend.hosts["c"].exit(137)
        bed.clock.jump(5.0)
        await bed.until(lambda: len(bed.record.incidents) == 2)
        await bed.finish()
        record = bed.record
        assert record.state is RunState.FAILED and len(record.attempts) == 2
        first, second = record.incidents
        assert (first.blamed, first.resumed_attempt) == (("b",), 2)
        assert second.blamed == ("c",) and second.resumed_attempt is None
        assert second.action == (
            "not recovered: 1 restart(s) in the last 3600 s, as many as [recovery] "
            "max_restarts allows"
        )
        # The host at fault the second time is not set aside: nothing took its place.
        assert [aside.host for aside in record.set_aside] == ["b"]

    asyncio.run(scenario())


def test_a_supervisor_outlives_its_run_until_a_host_set_aside_answers_and_is_cleared(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        bed = _bed(tmp_path, recovery=RecoveryConfig(mode="resume"))
        await _launched(bed)
        bed.backend.hosts["b"].cut()
        await bed.until(
            lambda: len(bed.record.attempts) == 2 and bed.record.state is RunState.RUNNING
        )
        # The run completes on the spare while b, set aside, still does not answer.
        for host in bed.backend.hosts.values():
            host.exit(0)
        await bed.until_state(RunState.COMPLETED)
        assert bed.task is not None
        await bed.until_idle_exits()
        assert not bed.task.done(), "it left the run's processes on b to a person"
        assert bed.record.set_aside[0].leftovers == healing.LEFTOVERS
        bed.backend.set_aside["b"].back()
        await bed.finish()
        assert bed.record.set_aside[0].leftovers == ""

    asyncio.run(scenario())


def test_a_host_set_aside_while_cut_off_has_the_run_s_leftovers_ended_once_it_answers(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        bed = _bed(tmp_path, recovery=RecoveryConfig(mode="resume"))
        await _launched(bed)
        run_dir = bed.record.nodes[1].run_dir
        bed.backend.hosts["b"].cut()
        await bed.until(
            lambda: len(bed.record.attempts) == 2 and bed.record.state is RunState.RUNNING
        )
        (aside,) = bed.record.set_aside
        assert (aside.host, aside.run_dir, aside.leftovers) == ("b", run_dir, healing.LEFTOVERS)
        # Tried while it does not answer, and again until it does.
        await bed.until(lambda: bed.backend.asked.count(f"end set aside b {aside.run_dir}") >= 2)
        assert bed.record.set_aside[0].leftovers == healing.LEFTOVERS
        bed.backend.set_aside["b"].back()
        await bed.until(lambda: bed.record.set_aside[0].leftovers == "")
        assert "b, set aside, answers again: ended what was left of the run there " in (
            bed.record.attempt.detail
        )
        assert "python3 (rank 2), python3 (rank 3)" in bed.record.attempt.detail
        tried = bed.backend.asked.count(f"end set aside b {aside.run_dir}")
        for host in bed.backend.hosts.values():
            host.exit(0)
        await bed.finish()
        # Ended once: never tried again.
        assert bed.backend.asked.count(f"end set aside b {aside.run_dir}") == tried

    asyncio.run(scenario())
