"""Reading one field of the probe's document: the value when it has the type it should, else
:data:`~ddptui.probe.facts.NA` (or nothing), never an exception."""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ddptui.probe.facts import NA, IPAddress, Maybe
from ddptui.untrusted import count

_T = TypeVar("_T")


def typed_field(data: Mapping[str, Any], key: str, kind: type[_T]) -> Maybe[_T]:
    """``data[key]`` when it is a ``kind``: a JSON integer counts as a float, a bool never as
    a number."""
    value = data.get(key)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        try:
            value = float(value)
        except OverflowError:
            return NA
    # JSON's NaN and Infinity parse to floats, but no fact is infinite or not a number (and
    # `check --json` could not print one).
    if isinstance(value, float) and not math.isfinite(value):
        return NA
    # bool is an int subclass; a JSON true is never a count.
    if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
        return value
    return NA


def text_or_empty(value: Any) -> str:
    """``value`` when it is a string: a reason, a detail, where none is as good as no text."""
    return value if isinstance(value, str) else ""


def parsed_items(value: Any, parse: Callable[[Any], _T | None]) -> list[_T]:
    """The items of a JSON list that ``parse`` reads; the others are left out."""
    if not isinstance(value, list):
        return []
    parsed = (parse(item) for item in value)
    return [item for item in parsed if item is not None]


def address_or_none(value: Any) -> IPAddress | None:
    # ip_address() also takes integers: a mistyped 7 is not the address 0.0.0.7.
    if not isinstance(value, str):
        return None
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def bounded_count(value: Any, high: int) -> Maybe[int]:
    """``value`` when it is a whole number from 0 to ``high``."""
    number = count(value, high)
    return NA if number is None else number
