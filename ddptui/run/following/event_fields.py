"""Reading one field of a host's event: total, capped, plain.

Each reader takes what JSON gave for one field, whatever it is, and never raises: a value of the
wrong type, not finite or out of range is read as not reported (``None``, or an empty mapping or
set), never as a reason to drop the event. What a reader returns is safe as it is: a string is
:func:`~ddptui.untrusted.plain` and cut to its cap, a time is one a clock can give, and a
duration, rate or size is at most its cap. The caps are the events' limits, which
``docs/events.md`` lists and :mod:`ddptui.run.following.events` gives with its events, each of which
it builds from these readers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from ddptui.untrusted import ELLIPSIS, plain

MAX_TEXT_CHARS: Final = 1024
"""Short strings: device, backend, hostname, source, reason, versions, config strings (a cut
one ends with ``…``)."""
MAX_PATH_CHARS: Final = 4096
MAX_MESSAGE_CHARS: Final = 4096
MAX_TRACEBACK_CHARS: Final = 32768
"""A longer traceback keeps its end: the innermost frames and the exception itself."""
MAX_CONFIG_DEPTH: Final = 8
"""``config`` deeper than this is dropped: later code walks it (run records, the console)."""
MAX_SKIPPED_CHECKPOINTS: Final = 64
MAX_PHASE_CHARS: Final = 64
MAX_RESCUE_CHARS: Final = 200

MAX_EVENT_TIME: Final = float(2**32)
"""Event times (Unix seconds) are below this (February 2106) and not negative: beyond, a time
is no clock's, and ``time.localtime`` (a straggler's "since", a log's date) raises on it."""
MAX_STEP_S: Final = 3600.0
"""``step_time_s`` and ``compute_s`` above an hour are read as an hour: a step takes less, and
ten step times make the hang window, so one event must not stretch it without end."""
MAX_EXPECT_S: Final = 86400.0
"""A phase's ``expect_s`` (and a checkpoint's ``seconds``) above a day is read as a day: one
rank's word must not switch hang detection off for the whole run (the window is the longest
phase any rank is in)."""
MAX_SAMPLES_PER_S: Final = 1e9
"""A rank's ``samples_per_s`` above this is read as this: summed over ranks it stays finite."""
MAX_MIB: Final = float(2**30)
"""Memory (MiB: ``cuda_*_mib``, ``rss_mib``) above a pebibyte is read as a pebibyte."""

# Counts (ranks, steps, bytes) beyond int64 are nonsense from a host, not a huge run.
_MAX_COUNT: Final = 2**63 - 1


class _TooDeep(Exception):
    """Raised by :func:`_json_value` only: :func:`config` reads a config nested too deep as an
    empty one."""


def count(value: Any) -> int | None:
    """A non-negative integer that fits in int64, else ``None``."""
    return value if type(value) is int and 0 <= value <= _MAX_COUNT else None


def flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


# These read most fields of every step event, thousands a second at a thousand ranks: a
# comparison does finite()'s work (NaN fails every one; a bool's type is neither float nor int).


def unix_time(value: Any) -> float | None:
    if (type(value) is float or type(value) is int) and 0 <= value < MAX_EVENT_TIME:
        return float(value)
    return None


def amount(value: Any, cap: float) -> float | None:
    """A duration, rate or size: ``None`` unless a finite number and not negative; at most
    ``cap``."""
    if type(value) is float:
        if 0.0 <= value <= cap:
            return value
        return cap if cap < value < math.inf else None
    if type(value) is int and value >= 0:
        return float(value) if value <= cap else cap
    return None


def text(value: Any, limit: int = MAX_TEXT_CHARS) -> str | None:
    return _plain_text(value, limit) if isinstance(value, str) else None


def tail(value: Any, limit: int) -> str | None:
    """The end of ``value``, plain, in at most ``limit`` characters (newlines kept)."""
    if not isinstance(value, str):
        return None
    end = value[-limit:]
    shown = plain(end)
    if len(shown) <= limit:
        return shown
    # Escapes made it longer: keep the end still (the exception itself), whole escapes only.
    kept: list[str] = []
    room = limit - len(ELLIPSIS)
    for char in reversed(end):
        each = plain(char)
        if len(each) > room:
            break
        kept.append(each)
        room -= len(each)
    return ELLIPSIS + "".join(reversed(kept))


def _json_value(value: Any, depth: int) -> Any:
    """A read-only copy of a JSON value, its strings (keys too) plain and cut; raises
    :class:`_TooDeep` if too deep."""
    if depth > MAX_CONFIG_DEPTH:
        raise _TooDeep
    if isinstance(value, str):
        return _plain_text(value)
    if isinstance(value, dict):
        return MappingProxyType(
            {_plain_text(k): _json_value(v, depth + 1) for k, v in value.items()}
        )
    if isinstance(value, list):
        return tuple(_json_value(item, depth + 1) for item in value)
    return value


def _plain_text(value: str, limit: int = MAX_TEXT_CHARS) -> str:
    return plain(value, limit=limit, one_line=True)


def config(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        return MappingProxyType({})
    try:
        copied = _json_value(value, 0)
    except _TooDeep:
        return MappingProxyType({})
    assert isinstance(copied, Mapping)
    return copied


def versions(value: Any) -> Mapping[str, str]:
    if not isinstance(value, dict):
        return MappingProxyType({})
    return MappingProxyType(
        {
            _plain_text(key): _plain_text(version)
            for key, version in value.items()
            if isinstance(version, str)
        }
    )


CONTROL_REQUESTS = ("stop", "save")


def control(value: Any) -> frozenset[str]:
    if not isinstance(value, list):
        return frozenset()
    return frozenset(item for item in value[: len(CONTROL_REQUESTS)] if item in CONTROL_REQUESTS)


LAUNCH_STAMPS = ("process", "imported", "rendezvous")


def launch(value: Any) -> Mapping[str, float]:
    if not isinstance(value, dict):
        return MappingProxyType({})
    stamps = {key: unix_time(value.get(key)) for key in LAUNCH_STAMPS}
    return MappingProxyType({key: at for key, at in stamps.items() if at is not None})
