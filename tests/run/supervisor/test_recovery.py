"""Recovery's decision (pure): a fault in the code is given up at once, a run past
``max_restarts`` in ``window_s`` is left to a person, node 0 holding a script's checkpoints is not
replaced once silent, and each blamed host takes a spare this run has neither used nor set aside."""

from __future__ import annotations

import dataclasses
from typing import Any

from ddptui.config.model import Config, HostConfig, RecoveryConfig
from ddptui.run.backends.base import SparePool
from ddptui.run.following.state import Hang, RankAtHang
from ddptui.run.record import Incident, RunRecord, SetAside
from ddptui.run.supervisor.recovery import (
    Blame,
    GiveUp,
    Replace,
    blame_hang,
    blame_lost,
    blame_unreachable,
    decide,
)
from tests.run.bed import two_host_record
from tests.run.supervisor.fake_backend import config

NOW = 1_800_000_000.0
LOST_B = Blame(("b",), "b stopped answering: link cut")
HOSTS_FILE_MORE = "add a spare, or set [recovery] min_nodes to go on with fewer"


def _decide(
    config: Config, record: RunRecord, found: Blame | None, now: float, *args: Any
) -> Replace | GiveUp:
    """Recovery's decision with the hosts file's spares, as the SSH backend offers them."""
    names = tuple(host.name for host in config.spares)
    pool = SparePool(names, f"{len(names)} spare(s) in the hosts file", HOSTS_FILE_MORE)
    return decide(config, record, found, now, *args, spares=pool)


def _record() -> RunRecord:
    record = two_host_record(1)
    record.nodes = [
        dataclasses.replace(node, host=host) for node, host in zip(record.nodes, "ab", strict=True)
    ]
    return record


def _resumed(number: int, ago_s: float) -> Incident:
    return Incident(number, number, NOW - ago_s, "lost", ("b",), "", resumed_attempt=number + 1)


def test_a_blamed_host_takes_the_first_spare_the_run_has_not_used_or_set_aside() -> None:
    spares = (HostConfig("c", "10.0.0.3", spare=True), HostConfig("d", "10.0.0.4", spare=True))
    on = config(recovery=RecoveryConfig(mode="resume"))
    on = dataclasses.replace(on, hosts=(*on.hosts[:2], *spares))
    record = _record()
    assert _decide(on, record, LOST_B, NOW) == Replace({"b": "c"})
    record.set_aside.append(SetAside("c", "an earlier fault", NOW - 60))
    assert _decide(on, record, LOST_B, NOW) == Replace({"b": "d"})
    assert Replace({"b": "d"}).words == "d in place of b"


def test_no_host_to_blame_no_spare_left_or_node_0_at_fault_is_given_up_saying_why() -> None:
    on = config(recovery=RecoveryConfig(mode="resume"))
    record = _record()
    assert _decide(on, record, None, NOW) == GiveUp(
        "no host is to blame: the fault is in the job's code or its data"
    )
    raised = "your code raised ValueError: bad batch after step 30 on every rank"
    assert _decide(on, record, None, NOW, 30, raised) == GiveUp(
        f"{raised}: no host is to blame, and it would fail the same on any"
    )
    # Node 0 answering hands its checkpoints on. Silent, a script's went with it; the bundled
    # trainer's other ranks wrote rescues as the attempt failed, which the backend hands on.
    assert _decide(on, record, Blame(("a",), "killed"), NOW) == Replace({"a": "c"})
    pool = SparePool(("c",), "1 spare(s) in the hosts file", HOSTS_FILE_MORE)
    lost = Blame(("a",), "lost")
    assert record.entry == "trainer"
    assert decide(on, record, lost, NOW, spares=pool, unreachable={"a"}) == Replace({"a": "c"})
    record.entry = "script"
    assert decide(on, record, lost, NOW, spares=pool, unreachable={"a"}) == GiveUp(
        "node 0 (a) holds the checkpoints, and it did not answer when the run failed"
    )
    record.entry = "trainer"
    record.set_aside.append(SetAside("c", "an earlier fault", NOW - 60))
    refused = _decide(on, record, LOST_B, NOW)
    assert isinstance(refused, GiveUp) and refused.why.startswith("no spare host left to replace b")


def test_past_max_restarts_in_the_window_the_run_is_left_to_a_person() -> None:
    on = config(recovery=RecoveryConfig(mode="resume", max_restarts=1, window_s=600))
    record = _record()
    record.incidents.append(_resumed(1, ago_s=300))
    assert _decide(on, record, LOST_B, NOW) == GiveUp(
        "1 restart(s) in the last 600 s, as many as [recovery] max_restarts allows"
    )
    # Out of the window, the earlier restart no longer counts.
    record.incidents[0] = _resumed(1, ago_s=900)
    assert _decide(on, record, LOST_B, NOW) == Replace({"b": "c"})


def test_a_failure_that_comes_back_at_the_same_step_after_a_recovery_is_the_job_s() -> None:
    on = config(recovery=RecoveryConfig(mode="resume"))
    record = _record()
    # Attempt 1 failed at step 40 on b; recovery resumed it as attempt 2, on the spare.
    record.attempts.append(dataclasses.replace(record.attempts[-1], number=2))
    first = _resumed(1, ago_s=60)
    first.last_step = 40
    # Attempt 2's own incident is recorded as it is judged failed, before this is decided.
    now = Incident(2, 2, NOW, "killed", ("c",), "killed", last_step=40)
    record.incidents += [first, now]
    assert _decide(on, record, Blame(("c",), "killed"), NOW, 40) == GiveUp(
        "attempt 1 failed at step 40 too, before recovery resumed it on other hosts: the fault "
        "follows the job, not a host"
    )
    assert _decide(on, record, LOST_B, NOW, 55) == Replace({"b": "c"})


def test_with_no_spare_left_the_run_goes_on_with_fewer_nodes_only_as_allowed() -> None:
    record = _record()
    record.nodes.append(dataclasses.replace(record.nodes[1], host="x", node_rank=2))
    no_spare = config(recovery=RecoveryConfig(mode="resume", min_nodes=2))
    no_spare = dataclasses.replace(no_spare, hosts=no_spare.ordered_hosts)
    assert _decide(no_spare, record, LOST_B, NOW) == Replace({}, ("b",), 2)
    assert Replace({}, ("b",), 2).words == "2 node(s), without b"
    # Never below min_nodes; never without it set; a script only when it says it can.
    both = _decide(no_spare, record, Blame(("b", "x"), "lost"), NOW)
    assert isinstance(both, GiveUp) and both.why.endswith(
        "and 1 node(s) would be fewer than [recovery] min_nodes (2)"
    ), both
    unset = dataclasses.replace(no_spare, recovery=RecoveryConfig(mode="resume"))
    refused = _decide(unset, record, LOST_B, NOW)
    assert isinstance(refused, GiveUp) and refused.why.endswith(
        "add a spare, or set [recovery] min_nodes to go on with fewer"
    ), refused
    record.entry = "script"
    refused = _decide(no_spare, record, LOST_B, NOW)
    assert isinstance(refused, GiveUp) and "only with [recovery] elastic = true" in refused.why
    elastic = RecoveryConfig(mode="resume", min_nodes=2, elastic=True)
    assert _decide(dataclasses.replace(no_spare, recovery=elastic), record, LOST_B, NOW) == (
        Replace({}, ("b",), 2)
    )


def test_a_spare_for_one_blamed_host_and_fewer_nodes_for_the_other() -> None:
    record = _record()
    record.nodes.append(dataclasses.replace(record.nodes[1], host="x", node_rank=2))
    on = config(recovery=RecoveryConfig(mode="resume", min_nodes=2))
    decided = _decide(on, record, Blame(("b", "x"), "lost"), NOW)
    assert decided == Replace({"b": "c"}, ("x",), 2)
    assert decided.words == "c in place of b, 2 node(s), without x"


def _at(rank: int, host: str, process: str | None, why: str | None) -> RankAtHang:
    return RankAtHang(rank, host, 40, process, 0.0 if process != "R" else 100.0, why)


def test_a_hang_blames_the_hosts_of_stopped_ranks_and_nothing_else() -> None:
    waiting = _at(0, "a", "S", None)
    stopped = _at(1, "b", "T", "its process is stopped")
    blamed = blame_hang(Hang(NOW, 20.0, 40, (waiting, stopped)))
    assert blamed == Blame(("b",), "the run hung: rank 1 on b: its process is stopped")
    # Once in I/O is as often a page fault under load as a dead mount; every rank waiting
    # alike, or one spinning in the job's own code: a person should look.
    assert blame_hang(Hang(NOW, 20.0, 40, (waiting, _at(1, "b", "D", "in I/O")))) is None
    assert blame_hang(Hang(NOW, 20.0, 40, (waiting, _at(1, "b", "S", None)))) is None
    spinning = _at(1, "b", "R", "it runs at 100% CPU while the others wait")
    assert blame_hang(Hang(NOW, 20.0, 40, (waiting, spinning))) is None


def test_a_host_that_could_not_be_reached_when_the_run_failed_is_blamed() -> None:
    assert blame_unreachable({}) is None
    found = blame_unreachable({"b": "refused the connection\x1b[2J", "a": "timed out"})
    assert found == Blame(
        ("a", "b"),
        "a could not be reached when the run failed (timed out); b could not be reached when "
        "the run failed (refused the connection\\x1b[2J)",
    )


def test_the_nodes_a_scheduler_lost_are_blamed_in_its_words_and_none_blames_nothing() -> None:
    assert blame_lost({}) is None
    lost = {"n2": "down*: Not responding", "n1": "fail\x1b[2J: \nbad\tgpu"}
    assert blame_lost(lost) == Blame(
        ("n1", "n2"),
        "the scheduler lost n1 (fail\\x1b[2J: \\nbad\\tgpu); the scheduler lost n2 "
        "(down*: Not responding)",
    )


def test_a_pool_s_own_words_say_where_its_spares_come_from_and_how_to_have_more() -> None:
    on = config(recovery=RecoveryConfig(mode="resume"))
    record = _record()
    pool = SparePool(("a", "b", "s1"), "1 spare node(s) in the job's allocation", "ask for more")
    assert decide(on, record, LOST_B, NOW, spares=pool) == Replace({"b": "s1"})
    refused = decide(on, record, LOST_B, NOW, spares=dataclasses.replace(pool, names=("a", "b")))
    assert refused == GiveUp(
        "no spare host left to replace b (1 spare node(s) in the job's allocation, every one "
        "used or set aside); ask for more"
    )
