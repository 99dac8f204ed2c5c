"""A host's numbers in a few characters: whatever one sends (``1e308``, ``5e-324``, a percentage
of a total of ``1e-300``), they show it as a short figure, a bar or ``?``, and never raise.

Shared by the health screen's GPUs (:mod:`ddptui.present.hosts`) and the console's widgets.
"""

from __future__ import annotations

from rich.text import Text

from ddptui.untrusted import finite

FIGURE_CHARS = 12
"""The most characters a number takes as its format gives it; a longer one (a host's ``1e308``
as ``.0f`` is 309 digits) is shown in three significant digits instead."""
UNKNOWN = "?"
"""Stands for a number that is no finite number."""


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
