"""The ``--json`` documents as the commands print them: one JSON document, each member of the
top-level object on a line of its own and each object of a list member on its own line.

Indented in full (``indent=2``), Python encodes with its pure-Python encoder: a 512-host
check's document took a tenth of the command's time to print, and a status of 4,096 ranks or a
dump of 4,096 stacks ran to hundreds of thousands of lines. One element a line keeps the
document diffable and ``grep``-able at the C encoder's speed; ``jq`` reads it as any other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any


def _compact(value: Any) -> str:
    # ensure_ascii: whatever a host sent is escapes in the document, never raw bytes;
    # allow_nan=False: NaN is no JSON (the parsers already refuse non-finite values).
    return json.dumps(value, separators=(", ", ": "), ensure_ascii=True, allow_nan=False)


def json_text(document: Mapping[str, Any] | list[Any]) -> str:
    """``document`` as the commands print it, with its final newline."""
    if isinstance(document, list):
        return _list(document, "") + "\n"
    members = [f"  {_compact(key)}: {_member(value)}" for key, value in document.items()]
    return "{\n" + ",\n".join(members) + "\n}\n" if members else "{}\n"


def _member(value: Any) -> str:
    return _list(value, "  ") if isinstance(value, list) else _compact(value)


def _list(items: list[Any], indent: str) -> str:
    if not items:
        return "[]"
    lines = ",\n".join(f"{indent}  {_compact(item)}" for item in items)
    return f"[\n{lines}\n{indent}]"


def write_json(document: Mapping[str, Any] | list[Any], stream: IO[str]) -> None:
    """``document`` to ``stream`` in one write (json.dump writes each token)."""
    stream.write(json_text(document))
