"""A GPU's heartbeat sample in words: what its own counters say is wrong with it now (the run
screen's GPU pane shows them beside its use)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddptui.health.gpu_health import throttled_by
from ddptui.health.wording import and_list, plural
from ddptui.probe.sections import MAX_ERROR_COUNT
from ddptui.untrusted import count


def gpu_faults(gpu: Mapping[str, Any]) -> list[str]:
    """``["slowed by its own heat (hardware thermal slowdown)", "2 uncorrected ECC errors"]``
    for a GPU's typed sample (:func:`ddptui.run.following.sample.sample_of`'s); [] for a healthy
    one, or one whose host did not say."""
    said = []
    mask = count(gpu.get("throttle_reasons"), MAX_ERROR_COUNT)
    reasons = throttled_by(mask) if mask is not None else ()
    if reasons:
        said.append("slowed by " + and_list([reason.words for reason in reasons]))
    if gpu.get("remap_failed") == 1:
        said.append("a memory row could not be remapped: replace it")
    elif gpu.get("reset_pending") == 1:
        said.append("memory waits for a GPU reset")
    ecc = count(gpu.get("ecc.errors.uncorrected.volatile.total"), MAX_ERROR_COUNT)
    if ecc:
        said.append(plural(ecc, "uncorrected ECC error"))
    down = count(gpu.get("nvlinks_down"), MAX_ERROR_COUNT)
    if down:
        said.append(f"{plural(down, 'NVLink link')} down")
    errors = count(gpu.get("nvlink_errors"), MAX_ERROR_COUNT)
    if errors:
        said.append(plural(errors, "NVLink error"))
    return said
