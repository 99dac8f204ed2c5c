"""Host values as table cells: always ``Text`` through the sanitiser, never markup.

Numbers are a host's too: whatever one sends (``1e308``, ``5e-324``, a percentage of a
total of ``1e-300``), a cell shows it in a few characters or as ``?``, and never raises.
"""

from __future__ import annotations

from rich.text import Text

from ddptui.probe.facts import NA, Maybe
from ddptui.untrusted import finite, plain

ODD = "◆"
"""Marks a value that differs from the other hosts': a symbol as well as a colour."""
FIGURE_CHARS = 12
"""The most characters a number takes as its format gives it; a longer one (a host's ``1e308``
as ``.0f`` is 309 digits) is shown in three significant digits instead."""
UNKNOWN = "?"
"""Stands for a number that is no finite number."""


def cell(value: Maybe[object] | str | None, style: str = "", *, limit: int = 60) -> Text:
    """One value for a cell: one line, control characters as escapes, ``n/a`` when missing."""
    if value is NA or value is None:
        return Text("n/a", style="dim")
    return Text(plain(str(value), limit=limit, one_line=True), style=style)


def odd_cell(value: Maybe[object] | str | None, odd: bool) -> Text:
    """A parity value; an odd one is marked by colour and by :data:`ODD`."""
    text = cell(value)
    if odd:
        text.stylize("bold red")
        text.append(f" {ODD}", style="bold red")
    return text


def figure(value: float, spec: str) -> str:
    """``value`` as ``spec`` formats it, in three significant digits when that would take more
    than :data:`FIGURE_CHARS` characters; :data:`UNKNOWN` when it is no finite number."""
    number = finite(value)
    if number is None:
        return UNKNOWN
    # Only a number this small can fit: a larger one is never formatted whole (an int of
    # thousands of digits costs time to print, and a float's .0f is hundreds of digits).
    if abs(number) < 10.0**FIGURE_CHARS:
        text = f"{value:{spec}}"
        if len(text) <= FIGURE_CHARS:
            return text
    return f"{number:.3g}"


def number(value: float | None, spec: str, suffix: str = "") -> Text:
    """A cell for ``value`` (see :func:`figure`), ``–`` when there is none."""
    if value is None:
        return Text("–", style="dim")
    return Text(f"{figure(value, spec)}{suffix}", justify="right")


def share(part: object, whole: object) -> float | None:
    """``part`` of ``whole`` from 0 to 1: more than the whole is all of it, less than nothing
    none. ``None`` when either is no finite number or the whole is not positive."""
    used, total = finite(part), finite(whole)
    if used is None or total is None or total <= 0:
        return None
    # Compared first: 1e308 / 1e-300 would be infinite.
    if used >= total:
        return 1.0
    return max(used, 0.0) / total


def percent(value: object) -> float | None:
    """A host's percentage from 0 to 100 (beyond them, the nearest); ``None`` when it is no
    finite number."""
    number = finite(value)
    return None if number is None else min(max(number, 0.0), 100.0)


def bar(used: float, total: float, width: int = 12) -> Text:
    """``used``/``total`` as a bar of ``width`` cells followed by the percentage (an empty bar
    and ``?`` when there is none, see :func:`share`)."""
    fraction = share(used, total)
    if fraction is None:
        return Text.assemble(("░" * width, "dim"), f"   {UNKNOWN}%")
    filled = round(fraction * width)
    style = "red" if fraction > 0.9 else "yellow" if fraction > 0.5 else "green"
    return Text.assemble(
        ("█" * filled, style), ("░" * (width - filled), "dim"), f" {fraction * 100:3.0f}%"
    )


def in_view(widths: list[int], room: int, *, scroll: int = 0, padding: int = 1) -> list[bool]:
    """For each column of ``widths`` (its widest content, in cells; each column also takes
    ``padding`` on either side), whether a table ``room`` cells wide scrolled ``scroll`` cells
    to the right shows it whole."""
    shown = []
    start = 0
    for width in widths:
        end = start + width + 2 * padding
        shown.append(scroll <= start and end <= scroll + room)
        start = end
    return shown
