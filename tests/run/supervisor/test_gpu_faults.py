"""A GPU's own fault during a run, as the heartbeats carry it: a new Xid line is said first in
the failure it explains, its host named, and recovery sets that host aside; so does a GPU whose
memory waits for a reset. A program's own Xid (13, 31, 43, 45) blames nothing."""

from __future__ import annotations

from typing import Any

from ddptui.run.following.model import RunModel
from ddptui.run.following.sample import sample_of
from ddptui.run.following.state import Hang, clock_time
from ddptui.run.following.updates import Heartbeat
from ddptui.run.record import RunState
from ddptui.run.supervisor import ending, judging, recovery
from tests.run.bed import two_host_record
from tests.run.modelkit import Clock, exit_line, started, verdict_of

FELL_OFF = (
    "[ 5021.331] NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus."
)
PROGRAM = "NVRM: Xid (PCI:0000:00:06): 13, pid=2211, name=python3, Graphics Exception: ESR 0x1"
H200 = {"index": "0", "pci_bus_id": "00000000:00:06.0", "throttle_reasons": 1}
AT = 1796077338.0


def _beat(model: RunModel, host: str, at: float, **sample: Any) -> None:
    """A heartbeat as the head reads the agent's: through the sample's reader."""
    model.apply(Heartbeat(host, at, {1: True}, sample_of({"gpus": [H200], **sample})))


def test_a_new_xid_79_is_said_first_in_the_failure_and_its_host_is_blamed() -> None:
    clock = Clock()
    model = started(RunModel(two_host_record(), clock=clock))
    _beat(model, "b", AT - 2)
    _beat(model, "b", AT, xids=[FELL_OFF])
    # Its rank dies with the GPU; node a's torchrun exits first, failing on its peer.
    model.apply(exit_line("a", 1))
    model.apply(exit_line("b", 137))
    clock.now += 3.0
    verdict = verdict_of(model)
    assert verdict.state is RunState.FAILED and verdict.host == "b"
    words = f"b GPU 0 (PCI 0000:00:06) logged Xid 79, the GPU fell off the bus, at {clock_time(AT)}"
    assert verdict.detail.startswith(words + "; torchrun on "), verdict.detail
    found = recovery.blame_gpu(model)
    assert found is not None and found.hosts == ("b",) and found.why == words


def test_a_program_s_xid_blames_nothing_and_is_not_said_first() -> None:
    clock = Clock()
    model = started(RunModel(two_host_record(), clock=clock))
    _beat(model, "b", AT, xids=[PROGRAM, "no Xid here", 7])
    (seen,) = model.nodes["b"].xids
    assert seen.event.code == 13 and seen.gpu == 0
    assert recovery.blame_gpu(model) is None
    assert ending.gpu_fault(model) is None
    model.apply(exit_line("b", 1))
    clock.now += 3.0
    assert verdict_of(model).detail.startswith("torchrun on b")


def test_a_gpu_whose_memory_waits_for_a_reset_sets_its_host_aside() -> None:
    model = started(RunModel(two_host_record()))
    _beat(model, "a", AT)
    assert recovery.blame_gpu(model) is None
    model.apply(
        Heartbeat("a", AT + 2, {1: True}, sample_of({"gpus": [{**H200, "reset_pending": 1}]}))
    )
    found = recovery.blame_gpu(model)
    assert found is not None and found.hosts == ("a",) and "GPU 0's memory waits" in found.why


def test_a_host_s_flood_of_xid_lines_is_bounded() -> None:
    model = started(RunModel(two_host_record()))
    for beat in range(10):
        _beat(model, "a", AT + 2 * beat, xids=[FELL_OFF] * 50)
    assert len(model.nodes["a"].xids) == 16
    # The first is what tells what went wrong first.
    assert model.nodes["a"].xids[0].at == AT


def test_a_hang_after_a_gpu_s_xid_says_the_xid_first() -> None:
    model = started(RunModel(two_host_record()))
    hang = Hang(since=AT - 30, window_s=20.0, step=41, ranks=())
    assert judging.hang_words(model, hang, AT) == hang.summary(AT)
    _beat(model, "a", AT, xids=[FELL_OFF.replace("79", "48", 1)])
    said = judging.hang_words(model, hang, AT)
    assert said == (
        f"a GPU 0 (PCI 0000:00:06) logged Xid 48, a double-bit ECC error in the GPU's memory, "
        f"at {clock_time(AT)}; {hang.summary(AT)}"
    )
