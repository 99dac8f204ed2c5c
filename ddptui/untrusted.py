"""The one sanitiser for text that came from a host.

Everything a host sends (disconnect reasons, probe output, stderr, log lines, NCCL messages,
event fields, process names) may carry terminal escapes or markup. :func:`plain` turns it into
text that is safe to print or hand to a widget: control characters become visible escapes
(``\\x1b``), so a window-title or clipboard sequence is shown, never interpreted. Callers still
give rich and Textual ``Text`` objects, never markup strings built from this text.
"""

from __future__ import annotations

import re

# C0 controls except tab and newline, DEL, C1 controls (CSI and OSC among them), the Unicode
# line/paragraph separators, the bidi marks and overrides that can reorder what a terminal
# shows, and lone surrogates (from JSON "\\ud800"), which no terminal encoding can print.
_ALWAYS = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f{_ALWAYS}]")
_UNSAFE_ONE_LINE = re.compile(f"[\x00-\x1f{_ALWAYS}]")

ELLIPSIS = "…"


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\t":
        return "\\t"
    if char == "\n":
        return "\\n"
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def plain(text: str, *, limit: int | None = None, one_line: bool = False) -> str:
    """``text`` with every control character shown as an escape, cut to ``limit`` characters.

    ``one_line`` also escapes tabs and newlines (table cells, titles); otherwise they are kept.
    A cut text ends with ``…``.
    """
    if limit is not None and len(text) > limit:
        text = text[: max(limit - 1, 0)] + ELLIPSIS
    if text.isascii() and text.isprintable():
        # Nothing to escape (most of what hosts send): no need to search it.
        return text
    pattern = _UNSAFE_ONE_LINE if one_line else _UNSAFE
    return pattern.sub(_visible, text)


def plain_bytes(data: bytes, *, limit: int | None = None, one_line: bool = False) -> str:
    """:func:`plain` for raw bytes: invalid UTF-8 is replaced, never raised."""
    return plain(data.decode("utf-8", errors="replace"), limit=limit, one_line=one_line)
