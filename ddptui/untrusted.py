"""The one sanitiser for text that came from a host, and the checks for its numbers.

Everything a host sends (disconnect reasons, probe output, stderr, log lines, NCCL messages,
event fields, process names) may carry terminal escapes or markup. :func:`plain` turns it into
text that is safe to print or hand to a widget: control characters become visible escapes
(``\\x1b``), so a window-title or clipboard sequence is shown, never interpreted. Callers still
give rich and Textual ``Text`` objects, never markup strings built from this text.
"""

from __future__ import annotations

import math
import re
from typing import Any

# C0 controls except tab and newline, DEL, C1 controls (CSI and OSC among them), the Unicode
# line/paragraph separators, the bidi marks and overrides that can reorder what a terminal
# shows, lone surrogates (from JSON "\\ud800"), which no terminal encoding can print, and
# the joiners and variation selectors that terminals and Textual count cells for differently.
_DROPPED = "\u200d\ufe0e\ufe0f"
"""Shown as nothing: an emoji's presentation selector (gloo ends a message in ``🏖️``) or the
joiner of a sequence makes Textual count two cells where a terminal draws one, or the reverse,
and every column after it in a pane shifts."""
_ALWAYS = (
    "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff" + _DROPPED
)
_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f{_ALWAYS}]")
_UNSAFE_ONE_LINE = re.compile(f"[\x00-\x1f{_ALWAYS}]")

ELLIPSIS = "…"


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if char in _DROPPED:
        return ""
    if char == "\t":
        return "\\t"
    if char == "\n":
        return "\\n"
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def plain(text: str, *, limit: int | None = None, one_line: bool = False) -> str:
    """``text`` with every control character shown as an escape, in at most ``limit``
    characters.

    ``one_line`` also escapes tabs and newlines (table cells, titles); otherwise they are kept.
    A cut text ends with ``…``, and an escape is shown whole or not at all: a cut never leaves
    half of ``\\x1b`` that reads as something else.
    """
    pattern = _UNSAFE_ONE_LINE if one_line else _UNSAFE
    if limit is None:
        return _escaped(text, pattern)
    if limit < 1:
        return ""
    # Every character shows as one or more: only the first `limit` can be seen, and a host's
    # megabyte is not escaped to keep 80 characters of it.
    head = text[:limit]
    shown = _escaped(head, pattern)
    if len(head) == len(text) and len(shown) <= limit:
        return shown
    return _escaped_within(head, pattern, limit - 1) + ELLIPSIS


def _escaped(text: str, pattern: re.Pattern[str]) -> str:
    if text.isascii() and text.isprintable():
        # Nothing to escape (most of what hosts send): no need to search it.
        return text
    return pattern.sub(_visible, text)


def _escaped_within(text: str, pattern: re.Pattern[str], room: int) -> str:
    """The longest start of ``text`` escaped that fits in ``room`` characters and ends on a
    whole escape or character."""
    shown = []
    start = 0
    for match in pattern.finditer(text):
        safe = text[start : match.start()]
        escape = _visible(match)
        if len(safe) + len(escape) > room:
            shown.append(safe[:room])
            return "".join(shown)
        shown += (safe, escape)
        room -= len(safe) + len(escape)
        start = match.end()
    shown.append(text[start : start + room])
    return "".join(shown)


def plain_error(error: BaseException, *, limit: int = 300) -> str:
    """``error`` as ``Type: message`` on one line: a message may quote a host's value."""
    return plain(f"{type(error).__name__}: {error}", limit=limit, one_line=True)


def plain_bytes(data: bytes, *, limit: int | None = None, one_line: bool = False) -> str:
    """:func:`plain` for raw bytes: invalid UTF-8 is replaced, never raised."""
    if limit is not None:
        # A character takes at most 4 bytes: cut longer, these still decode to more than
        # `limit` characters, so plain sees the cut; a character split at the end decodes to
        # a replacement character past the first `limit`, never shown.
        data = data[: 4 * (limit + 1)]
    return plain(data.decode("utf-8", errors="replace"), limit=limit, one_line=one_line)


# --- numbers a host sends -------------------------------------------------------------------
# Total: any value in (whatever JSON or a line gave), a number or None out, never an exception.


def whole(text: Any, *, digits: int = 9) -> int | None:
    """``text`` as a whole number when it is one in ASCII digits, at most ``digits`` of them.

    ``"²".isdigit()`` and ``"٣".isdigit()`` are true as well, and ``int()`` refuses the first.
    """
    if isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= digits:
        return int(text)
    return None


def count(value: Any, high: int) -> int | None:
    """``value`` when it is an integer (JSON's, not a bool) from 0 to ``high``."""
    return value if type(value) is int and 0 <= value <= high else None


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool)."""
    if type(value) is float:
        return value if math.isfinite(value) else None
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            return None
    return None
