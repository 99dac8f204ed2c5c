"""A value found in a hosts file, written back the way it looked there, for the messages that
say what was expected and what was found instead.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable

_DESCRIBE_LIMIT = 60
_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def describe(value: object) -> str:
    """``value`` the way it looked in the file, then its TOML type: ``"22" (a string)``."""
    text = _literal(value)
    if len(text) > _DESCRIBE_LIMIT:
        text = text[: _DESCRIBE_LIMIT - 1] + "…"
    return f"{text} ({_type_name(value)})"


def _type_name(value: object) -> str:
    # bool before int: TOML booleans arrive as Python bools, which are ints.
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, datetime.datetime):
        return "a date-time"
    if isinstance(value, datetime.date):
        return "a date"
    if isinstance(value, datetime.time):
        return "a time"
    return type(value).__name__


def _literal(value: object, budget: int = _DESCRIBE_LIMIT) -> str:
    # The budget bounds both the output and the recursion: parsed TOML can nest deeply.
    if budget <= 0:
        return "…"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(str(value), repr(value))
    if isinstance(value, list):
        return "[" + _joined((_literal(item, budget - 2) for item in value), budget) + "]"
    if isinstance(value, dict):
        items = (f"{key_label(key)} = {_literal(item, budget - 4)}" for key, item in value.items())
        return "{" + _joined(items, budget) + "}"
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return repr(value)


def _joined(parts: Iterable[str], budget: int) -> str:
    text = ""
    for part in parts:
        text = f"{text}, {part}" if text else part
        if len(text) > budget:
            return text[:budget] + "…"
    return text


def key_label(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else json.dumps(name, ensure_ascii=False)
