"""The node agent's thinning of fast ranks' step events (``follow``'s :class:`Thinned`), pure:
rounds of the agent's reading played on a clock, the lines it would send read back."""

from __future__ import annotations

import itertools
import json

from ddptui.onhost.common import POLL_S
from ddptui.onhost.thinning import HEAD_EVENTS_PER_S, QUIET_S, RATE_WINDOW_S, Thinned, fold_s
from ddptui.run.following.progress import THINNED_WORLD, thinned_gap_s


def _step(step: int, time: float, loss: float = 1.0, world: int = 8) -> bytes:
    # As the bundled trainer writes it (json.dumps with its default separators).
    return json.dumps(
        {
            "v": 1, "type": "step", "rank": 0, "world_size": world, "time": time, "step": step,
            "loss": loss,
        }
    ).encode()  # fmt: skip


def _other(kind: str, time: float) -> bytes:
    return json.dumps({"v": 1, "type": kind, "rank": 0, "time": time}).encode()


class Agent:
    """One events file read a round at a time: what ``follow`` sends of it, as step numbers
    (and other events' types), with the time each was sent."""

    def __init__(self, phase: float = 0.0) -> None:
        self.thinned = Thinned()
        self.offset = 0
        self.sent: list[tuple[float, str]] = []
        self.clock = phase
        self._waiting: list[tuple[float, bytes]] = []

    def write(self, time: float, line: bytes) -> None:
        self._waiting.append((time, line))

    def rounds_until(self, end: float) -> None:
        while self.clock < end:
            self.clock += POLL_S
            ready = [line for time, line in self._waiting if time <= self.clock]
            self._waiting = [(time, line) for time, line in self._waiting if time > self.clock]
            for line in ready:
                self.offset += len(line) + 1
                self._send(self.thinned.take(self.offset, line, self.clock))
            self._send(self.thinned.end_round(self.clock))

    def _send(self, lines: list[tuple[int, bytes]]) -> None:
        offsets = [offset for offset, _ in lines]
        assert offsets == sorted(offsets), "lines of a file out of order"
        for _, line in lines:
            document = json.loads(line)
            what = str(document["step"]) if document["type"] == "step" else document["type"]
            self.sent.append((self.clock, what))

    def steps(self, since: int = 0, sent: int = 0) -> list[int]:
        """The steps sent from step ``since`` on, among the lines sent from the ``sent``-th."""
        return [int(what) for _, what in self.sent[sent:] if what.isdigit() and int(what) >= since]


def _train(
    agent: Agent,
    rate: float,
    seconds: float,
    first: int = 1,
    every: int = 1,
    start: float = 0.0,
    world: int = 8,
) -> float:
    """Step events at ``rate`` a second for ``seconds`` from ``start`` (the ranks' clock), every
    ``every`` steps from ``first``, in a world of ``world`` ranks; then the agent's rounds until
    a little after."""
    step, count = first, 0
    while count / rate < seconds:
        agent.write(start + count / rate, _step(step, start + count / rate, world=world))
        step += every
        count += 1
    agent.rounds_until(start + seconds + 2 * POLL_S)
    return start + count / rate


def test_a_fast_rank_sends_a_step_a_fold_or_so_and_every_node_the_same_steps() -> None:
    nodes = [Agent(phase) for phase in (0.0, 0.07, 0.19)]
    for agent in nodes:
        agent.write(0.0, _other("start", 0.0))
        _train(agent, rate=5.0, seconds=20.0)
    # Its pace is known once it has stepped for the rate window: 5 steps a second.
    settled = int(5 * (RATE_WINDOW_S + 1.0))
    first = nodes[0]
    assert first.sent[:2] == [(POLL_S, "start"), (POLL_S, "1")], "the first step waited"
    steps = first.steps(since=settled)
    # The smallest power of two of at least its steps in FOLD_S: eight steps, 1.6 s apart.
    assert all(step % 8 == 0 for step in steps[:-1])
    assert len(steps) <= (100 - settled) / 8 + 2, "not thinned"
    assert steps[-1] == 100, "the last step before the rank went quiet was held back"
    for other in nodes[1:]:
        assert other.steps(since=settled) == steps


def test_past_the_head_s_budget_a_larger_world_s_ranks_send_fewer_steps_alike() -> None:
    # Up to HEAD_EVENTS_PER_S ranks a rank folds a second; 4,096 ranks fold 2 s each.
    assert (fold_s(8), fold_s(HEAD_EVENTS_PER_S), fold_s(4096)) == (1.0, 1.0, 2.0)
    nodes = [Agent(phase) for phase in (0.0, 0.11)]
    for agent in nodes:
        agent.write(0.0, _other("start", 0.0))
        _train(agent, rate=5.0, seconds=30.0, world=4096)
    settled = int(5 * (RATE_WINDOW_S + 1.0))
    steps = nodes[0].steps(since=settled)
    # Sixteen steps, 3.2 s apart, rather than eight; the same steps on every node.
    assert all(step % 16 == 0 for step in steps[:-1])
    assert len(steps) <= (150 - settled) / 16 + 2, "not thinned to the larger fold"
    assert steps[-1] == 150
    assert nodes[1].steps(since=settled) == steps
    # Steps that never fall on the stride still go, once in three folds.
    misaligned = Agent()
    _train(misaligned, rate=5.0, seconds=30.0, first=3, every=10, world=4096)
    times = [when for when, what in misaligned.sent if what.isdigit()]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) <= 3 * fold_s(4096) + POLL_S and max(gaps) > QUIET_S + POLL_S


def test_a_slow_rank_sends_every_step() -> None:
    agent = Agent()
    _train(agent, rate=0.8, seconds=30.0)
    assert agent.steps() == list(range(1, 25))


def test_log_every_steps_apart_the_stride_is_in_their_steps() -> None:
    agent = Agent()
    _train(agent, rate=5.0, seconds=20.0, first=10, every=10)
    steps = agent.steps(since=10 * int(5 * (RATE_WINDOW_S + 1.0)))
    assert all(step % 80 == 0 for step in steps[:-1]) and len(steps) >= 8


def test_steps_that_never_fall_on_the_stride_are_still_sent_now_and_then() -> None:
    agent = Agent()
    _train(agent, rate=5.0, seconds=20.0, first=3, every=10)
    times = [when for when, what in agent.sent if what.isdigit()]
    assert max(b - a for a, b in itertools.pairwise(times)) <= QUIET_S + POLL_S


def test_other_events_go_at_once_after_the_step_held_before_them() -> None:
    agent = Agent()
    end = _train(agent, rate=10.0, seconds=5.0)
    agent.write(end, _step(51, end))
    agent.write(end, _other("checkpoint", end))
    agent.write(end + 0.01, _step(52, end + 0.01))
    agent.rounds_until(agent.clock + POLL_S)
    assert agent.sent[-3:] == [
        (agent.clock, "51"),
        (agent.clock, "checkpoint"),
        (agent.clock, "52"),
    ]


def test_a_new_attempt_from_an_earlier_checkpoint_starts_its_pace_afresh() -> None:
    agent = Agent()
    end = _train(agent, rate=5.0, seconds=10.0)
    agent.write(end + 5, _other("start", end + 5))
    resumed = len(agent.sent)
    _train(agent, rate=0.8, seconds=25.0, first=41, start=end + 5)
    assert agent.steps(sent=resumed) == list(range(41, 61))


def test_a_step_without_a_number_is_sent_as_it_is() -> None:
    thinned = Thinned()
    line = b'{"type": "step", "loss": 0.5}'
    assert thinned.take(10, line, 0.0) == [(10, line)]
    assert thinned.take(20, line, 0.0) == [(20, line)]


def test_the_head_knows_the_longest_gap_the_agent_s_thinning_makes() -> None:
    # The head does not import the agent's modules: its own copy of the fold must agree.
    assert THINNED_WORLD == HEAD_EVENTS_PER_S
    for world in (1, 8, 2048, 4096, 100_000):
        assert thinned_gap_s(world) == 2 * fold_s(world)
