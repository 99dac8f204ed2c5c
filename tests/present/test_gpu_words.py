"""A GPU's sample in the run screen's words: what its own counters say is wrong now, from the
agent's row as the head reads it; nothing for a healthy GPU or for values no GPU sends."""

from __future__ import annotations

from typing import Any

import pytest

from ddptui.present.gpus import gpu_faults
from ddptui.run.following.sample import sample_of


def _faults(**row: Any) -> list[str]:
    (gpu,) = sample_of({"gpus": [{"index": "0", **row}]})["gpus"]
    return gpu_faults(gpu)


def test_a_healthy_gpu_at_its_power_limit_says_nothing() -> None:
    healthy = {"throttle_reasons": 4, "reset_pending": 0, "remap_failed": 0, "nvlinks_down": 0}
    assert _faults(**healthy, nvlink_errors=0, pcie_replays=3) == []


def test_each_fault_is_said() -> None:
    assert _faults(
        throttle_reasons=0x4 | 0x8 | 0x40,
        reset_pending=1,
        **{"ecc.errors.uncorrected.volatile.total": 2},
        nvlinks_down=1,
        nvlink_errors=1234,
    ) == [
        "slowed by its own heat (hardware thermal slowdown)",
        "memory waits for a GPU reset",
        "2 uncorrected ECC errors",
        "1 NVLink link down",
        "1,234 NVLink errors",
    ]
    assert _faults(remap_failed=1, reset_pending=1) == [
        "a memory row could not be remapped: replace it"
    ]


@pytest.mark.parametrize("value", ["-1", "2", "1e308", "0x40", "nan", "[N/A]", True])
def test_what_no_gpu_sends_is_nothing(value: Any) -> None:
    fields = ["throttle_reasons", "reset_pending", "remap_failed"]
    if value != "2":  # two links down is what a GPU may send
        fields.append("nvlinks_down")
    assert _faults(**dict.fromkeys(fields, value)) == []
