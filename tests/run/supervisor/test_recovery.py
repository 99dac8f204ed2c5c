"""Recovery's decision (pure): a fault in the code is given up at once, a run past
``max_restarts`` in ``window_s`` is left to a person, node 0 (the checkpoints' holder) is not
replaced, and each blamed host takes a spare this run has neither used nor set aside."""

from __future__ import annotations

import dataclasses

from ddptui.config.model import HostConfig, RecoveryConfig
from ddptui.run.record import Incident, RunRecord, SetAside
from ddptui.run.supervisor.recovery import Blame, GiveUp, Replace, decide
from tests.run.bed import two_host_record
from tests.run.supervisor.fake_backend import config

NOW = 1_800_000_000.0
LOST_B = Blame(("b",), "b stopped answering: link cut")


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
    assert decide(on, record, LOST_B, NOW) == Replace({"b": "c"})
    record.set_aside.append(SetAside("c", "an earlier fault", NOW - 60))
    assert decide(on, record, LOST_B, NOW) == Replace({"b": "d"})
    assert Replace({"b": "d"}).words == "d in place of b"


def test_no_host_to_blame_no_spare_left_or_node_0_at_fault_is_given_up_saying_why() -> None:
    on = config(recovery=RecoveryConfig(mode="resume"))
    record = _record()
    assert decide(on, record, None, NOW) == GiveUp(
        "no host is to blame: the fault is in the job's code or its data"
    )
    assert decide(on, record, Blame(("a",), "killed"), NOW) == GiveUp(
        "node 0 (a) holds the checkpoints, and it is the host at fault"
    )
    record.set_aside.append(SetAside("c", "an earlier fault", NOW - 60))
    refused = decide(on, record, LOST_B, NOW)
    assert isinstance(refused, GiveUp) and refused.why.startswith("no spare host left to replace b")


def test_past_max_restarts_in_the_window_the_run_is_left_to_a_person() -> None:
    on = config(recovery=RecoveryConfig(mode="resume", max_restarts=1, window_s=600))
    record = _record()
    record.incidents.append(_resumed(1, ago_s=300))
    assert decide(on, record, LOST_B, NOW) == GiveUp(
        "1 restart(s) in the last 600 s, as many as [recovery] max_restarts allows"
    )
    # Out of the window, the earlier restart no longer counts.
    record.incidents[0] = _resumed(1, ago_s=900)
    assert decide(on, record, LOST_B, NOW) == Replace({"b": "c"})


def test_a_failure_that_comes_back_at_the_same_step_after_a_recovery_is_the_job_s() -> None:
    on = config(recovery=RecoveryConfig(mode="resume"))
    record = _record()
    # Attempt 1 failed at step 40 on b; recovery resumed it as attempt 2, on the spare.
    record.attempts.append(dataclasses.replace(record.attempts[-1], number=2))
    first = _resumed(1, ago_s=60)
    first.last_step = 40
    record.incidents.append(first)
    assert decide(on, record, Blame(("c",), "killed"), NOW, last=40) == GiveUp(
        "attempt 1 failed at step 40 too, before recovery resumed it on other hosts: the fault "
        "follows the job, not a host"
    )
    assert decide(on, record, LOST_B, NOW, last=55) == Replace({"b": "c"})
