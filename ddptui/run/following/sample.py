"""A heartbeat's sample as the head keeps it: each GPU's row typed, each rank's process state
and CPU, the new Xid lines; only known keys, numbers finite, strings short, whatever the host
sent (pure)."""

from __future__ import annotations

import math
from typing import Any

from ddptui.probe.facts import MAX_GPUS
from ddptui.probe.sections import pci_slot
from ddptui.untrusted import count, finite, plain, whole

GPU_FIELDS = (
    "index",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "clocks.sm",
    "clocks.max.sm",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "pstate",
    "ecc.errors.uncorrected.volatile.total",
    "pci_bus_id",
    "throttle_reasons",
    "reset_pending",
    "remap_failed",
    "pcie_replays",
    "nvlink_errors",
    "nvlinks_down",
)
"""What the agent samples of each GPU every 2 s: nvidia-smi's names and its printed values (or
NVML's, by the same names), then the GPU's health counters (``ddptui.onhost.follow``'s
``rows_health``: its PCI bus id, kept as the kernel log names it; NVML's throttle reasons as a
bit mask; 1 for a memory reset pending or a failed remap; the counts of PCIe replays, NVLink
errors and links down)."""
GPU_TEXT_FIELDS = frozenset({"pstate"})
"""Kept as text (``P0``); every other field is a number, or left out when nvidia-smi printed
none (``[N/A]``, ``[Not Supported]``)."""


MAX_XIDS = 8
"""New Xid lines a heartbeat may carry (the agent sends the first 8 it read since the last)."""
MAX_XID_CHARS = 512
MAX_SAMPLED_RANKS = 1024
PROCESS_STATE_LETTERS = frozenset("RSDZTtWXxKPI")
"""The states ``/proc/PID/stat`` shows (``ps``'s STAT letters)."""


def sample_of(value: Any) -> dict[str, Any]:
    """The heartbeat's sample with only known keys, numbers finite, strings short."""
    if not isinstance(value, dict):
        return {}
    sample: dict[str, Any] = {}
    for key in ("procs", "cpu_pct", "rss_mib"):
        number = finite(value.get(key))
        if number is not None:
            sample[key] = number
    gpus = value.get("gpus")
    if isinstance(gpus, list):
        sample["gpus"] = [_gpu(gpu) for gpu in gpus[:MAX_GPUS] if isinstance(gpu, dict)]
    ranks = value.get("ranks")
    if isinstance(ranks, dict):
        sample["ranks"] = _ranks(ranks)
    xids = value.get("xids")
    if isinstance(xids, list):
        lines = [line for line in xids[:MAX_XIDS] if isinstance(line, str)]
        sample["xids"] = [plain(line, limit=MAX_XID_CHARS, one_line=True) for line in lines]
    kernel_log = value.get("kernel_log")
    if isinstance(kernel_log, str):
        sample["kernel_log"] = plain(kernel_log, limit=200, one_line=True)
    return sample


def _ranks(value: dict[Any, Any]) -> dict[int, dict[str, Any]]:
    """Global rank → its process's state letter and CPU, for the hang judgement."""
    found: dict[int, dict[str, Any]] = {}
    for rank, seen in list(value.items())[:MAX_SAMPLED_RANKS]:
        number = whole(rank, digits=6)
        if number is None or not isinstance(seen, dict):
            continue
        state, cpu = seen.get("state"), finite(seen.get("cpu_pct"))
        found[number] = {
            "state": state if isinstance(state, str) and state in PROCESS_STATE_LETTERS else None,
            "cpu_pct": max(cpu, 0.0) if cpu is not None else None,
        }
    return found


_INDEX, _SLOT, _TEXT, _NUMBER = range(4)
_SPECIAL_FIELDS = {"index": _INDEX, "pci_bus_id": _SLOT}
_FIELD_KINDS = tuple(
    (key, _SPECIAL_FIELDS.get(key, _TEXT if key in GPU_TEXT_FIELDS else _NUMBER))
    for key in GPU_FIELDS
)
_EXACT = 2**53
"""Whole numbers a float holds exactly."""


def _gpu(printed: dict[Any, Any]) -> dict[str, int | float | str]:
    """One GPU's row as nvidia-smi printed it (or as a supervisor relays it, already typed),
    typed: whole numbers as ints, the rest finite floats; an ``index`` that is no GPU's (0 to
    ``MAX_GPUS - 1``) is left out. (Every host's every GPU, every 2 s: the common cases,
    numbers already typed, are taken first.)"""
    gpu: dict[str, int | float | str] = {}
    for key, kind in _FIELD_KINDS:
        value = printed.get(key)
        if value is None:
            continue
        if kind == _NUMBER:
            typed = type(value)
            if typed is int and -_EXACT < value < _EXACT:
                gpu[key] = value
                continue
            if typed is str:
                number = _number(value.strip()[:32])
            elif typed is float or typed is int:
                number = finite(value)
            else:
                continue
            if number is not None:
                # Whole numbers a float holds exactly as ints ("81559" MiB), not 1e308 as 309
                # digits.
                gpu[key] = int(number) if number.is_integer() and abs(number) < _EXACT else number
            continue
        text = value.strip()[:32] if isinstance(value, str) else None
        if kind == _INDEX:
            index = whole(text, digits=2) if text is not None else count(value, MAX_GPUS - 1)
            if index is not None and index < MAX_GPUS:
                gpu[key] = index
        elif kind == _SLOT:
            slot = pci_slot(text) if text is not None else None
            if slot is not None:
                gpu[key] = slot
        elif text is not None:
            gpu[key] = plain(text, limit=32, one_line=True)
    return gpu


def _number(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None
