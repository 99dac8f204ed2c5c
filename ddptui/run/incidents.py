"""A run's incidents (a node failed, what was blamed, how the run went on) and the hosts it set
aside: values of the run record (:mod:`ddptui.run.record`), their TOML tables and their JSON.

Read back from TOML, every value is checked and bounded: a table that ddptui did not write
raises :class:`TypeError` or :class:`KeyError`, which make the whole record unreadable. Written,
every text and list is cut to the bounds the reader holds it to: a host's long message must
not make the run's record unreadable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddptui.run.following.event_fields import MAX_STEP_S
from ddptui.untrusted import ELLIPSIS

MAX_INCIDENTS = 1000
"""Incidents a record keeps, the newest: a run that failed this often has said all it will."""
MAX_HOSTS = 4096
"""Hosts an incident blames, or a run sets aside, at most: more than any run of ddptui's."""
MAX_HOST_TEXT = 256
"""A host's name, at most (DNS's are 253 characters)."""
MAX_WORDS = 1000
"""A cause, a reason, an action or a notify hook's failure, at most."""


@dataclass(frozen=True)
class SetAside:
    """A host the run will not use again until the user brings it back."""

    host: str
    why: str
    at: float
    """When it was set aside (wall time)."""
    run_dir: str = ""
    """Its node's directory of the run: where its processes are found."""
    leftovers: str = ""
    """Why the run's processes may still live there (it did not answer when the others were
    ended); "" once they are known gone."""

    def to_document(self) -> dict[str, Any]:
        """The record's table."""
        table: dict[str, Any] = {
            "host": _cut(self.host, MAX_HOST_TEXT),
            "why": _cut(self.why, MAX_WORDS),
            "at": self.at,
        }
        for key in ("run_dir", "leftovers"):
            if value := getattr(self, key):
                table[key] = _cut(value, MAX_WORDS)
        return table

    @classmethod
    def from_document(cls, table: Any) -> SetAside:
        table = _table(table, "set_aside")
        return cls(
            _host(table["host"]),
            _words(table, "why"),
            _time(table, "at"),
            _words(table, "run_dir", ""),
            _words(table, "leftovers", ""),
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON documents' form (``status --json``, the notify hook's)."""
        return {
            "host": self.host,
            "why": self.why,
            "at": _finite(self.at),
            "leftovers": self.leftovers,
        }


@dataclass
class Incident:
    """One failure of the run and what came of it; the supervisor fills the later fields in as
    they become known."""

    number: int
    """1, 2, … in the run."""
    attempt: int
    """The attempt that failed."""
    detected_at: float
    cause: str
    """In words: ``rank 3 on gpu-b was killed by SIGKILL``."""
    blamed: tuple[str, ...]
    """The hosts held to be at fault."""
    why: str
    """Why those hosts are blamed."""
    fault_at: float | None = None
    """When the fault happened, where the evidence says."""
    action: str = ""
    """What was done: ``resumed on gpu-e in place of gpu-b``, ``failed: no spare left``."""
    resumed_attempt: int | None = None
    last_step: int | None = None
    """The last step any rank made before the fault."""
    checkpoint_step: int | None = None
    """The step the resume starts from."""
    first_step_at: float | None = None
    """When the resumed attempt made its first new step."""
    notified: str = ""
    """The notify hook's outcome: "" while none ran, ``ok``, or what went wrong."""
    last_step_at: float | None = None
    """When the failed attempt made ``last_step`` (the head node's clock); None when it made
    no step of its own."""
    step_s: float | None = None
    """The failed attempt's seconds per step, as its ranks last said."""

    @property
    def resumed(self) -> bool:
        """Whether the run was resumed after it: a restart."""
        return self.resumed_attempt is not None

    @property
    def steps_redone(self) -> int | None:
        """Steps the resume makes again (known once both ends are)."""
        if self.last_step is None or self.checkpoint_step is None:
            return None
        return max(0, self.last_step - self.checkpoint_step)

    @property
    def checkpoint_at(self) -> float | None:
        """When the failed attempt made the checkpoint's step: its last step's time, less the
        steps redone at its pace (known once the resume says its checkpoint's step)."""
        redone = self.steps_redone
        if redone is None or self.last_step_at is None:
            return None
        if redone == 0:
            return self.last_step_at
        return None if self.step_s is None else self.last_step_at - redone * self.step_s

    def to_document(self) -> dict[str, Any]:
        """The record's table (TOML has no null: what is not known is left out)."""
        table: dict[str, Any] = {
            "number": self.number,
            "attempt": self.attempt,
            "detected_at": self.detected_at,
            "cause": _cut(self.cause, MAX_WORDS),
            "blamed": [_cut(host, MAX_HOST_TEXT) for host in self.blamed[:MAX_HOSTS]],
            "why": _cut(self.why, MAX_WORDS),
            "action": _cut(self.action, MAX_WORDS),
            "notified": _cut(self.notified, MAX_WORDS),
        }
        for key in _OPTIONAL:
            # What the reader would refuse is left out, as not known: the record must read.
            if (value := getattr(self, key)) is not None and math.isfinite(value):
                table[key] = value
        if self.step_s is not None and self.step_s >= 0.0:
            table["step_s"] = min(self.step_s, MAX_STEP_S)
        return table

    @classmethod
    def from_document(cls, table: Any) -> Incident:
        table = _table(table, "incident")
        blamed = table["blamed"]
        if not isinstance(blamed, list) or len(blamed) > MAX_HOSTS:
            raise TypeError(f"an incident's blamed is not a list of at most {MAX_HOSTS} hosts")
        return cls(
            number=_whole(table, "number", 1),
            attempt=_whole(table, "attempt", 1),
            detected_at=_time(table, "detected_at"),
            cause=_words(table, "cause"),
            blamed=tuple(_host(host) for host in blamed),
            why=_words(table, "why"),
            fault_at=_time(table, "fault_at") if "fault_at" in table else None,
            action=_words(table, "action", ""),
            resumed_attempt=(
                _whole(table, "resumed_attempt", 1) if "resumed_attempt" in table else None
            ),
            last_step=_whole(table, "last_step", 0) if "last_step" in table else None,
            checkpoint_step=(
                _whole(table, "checkpoint_step", 0) if "checkpoint_step" in table else None
            ),
            first_step_at=_time(table, "first_step_at") if "first_step_at" in table else None,
            notified=_words(table, "notified", ""),
            last_step_at=_time(table, "last_step_at") if "last_step_at" in table else None,
            step_s=_step_s(table) if "step_s" in table else None,
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON documents' form (``status --json``, the notify hook's): every field, null
        where not known, and ``steps_redone``."""
        return {
            "number": self.number,
            "attempt": self.attempt,
            "detected_at": _finite(self.detected_at),
            "cause": self.cause,
            "blamed": list(self.blamed),
            "why": self.why,
            "fault_at": _finite(self.fault_at),
            "action": self.action,
            "resumed_attempt": self.resumed_attempt,
            "last_step": self.last_step,
            "checkpoint_step": self.checkpoint_step,
            "steps_redone": self.steps_redone,
            "first_step_at": _finite(self.first_step_at),
            "notified": self.notified,
            "last_step_at": _finite(self.last_step_at),
            "step_s": _finite(self.step_s),
        }


_OPTIONAL = (
    "fault_at",
    "resumed_attempt",
    "last_step",
    "checkpoint_step",
    "first_step_at",
    "last_step_at",
)


def incidents_of(value: Any) -> list[Incident]:
    """A record's ``incidents`` array."""
    return [Incident.from_document(table) for table in _array(value, "incidents", MAX_INCIDENTS)]


def set_aside_of(value: Any) -> list[SetAside]:
    """A record's ``set_aside`` array."""
    return [SetAside.from_document(table) for table in _array(value, "set_aside", MAX_HOSTS)]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def _array(value: Any, key: str, limit: int) -> list[Any]:
    if not isinstance(value, list) or len(value) > limit:
        raise TypeError(f"{key} is not an array of at most {limit}")
    return value


def _table(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"a {what} is not a table")
    return value


def _host(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_HOST_TEXT:
        raise TypeError(f"a host is not a name of 1 to {MAX_HOST_TEXT} characters")
    return value


def _words(table: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = table.get(key, default)
    if not isinstance(value, str) or len(value) > MAX_WORDS:
        raise TypeError(f"{key} is not a string of at most {MAX_WORDS} characters")
    return value


def _time(table: Mapping[str, Any], key: str) -> float:
    value = table[key]
    # A time that is no time (inf, nan) could not be shown as a clock's.
    if type(value) not in (int, float) or not math.isfinite(value):
        raise TypeError(f"{key} is not a finite number")
    return float(value)


def _step_s(table: Mapping[str, Any]) -> float:
    value = table["step_s"]
    if type(value) not in (int, float) or not 0 <= value <= MAX_STEP_S:
        raise TypeError(f"step_s is not a number of seconds from 0 to {MAX_STEP_S:g}")
    return float(value)


def _whole(table: Mapping[str, Any], key: str, low: int) -> int:
    value = table[key]
    if type(value) is not int or value < low:
        raise TypeError(f"{key} is not a whole number from {low}")
    return int(value)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None
