"""Host values as table cells: always ``Text`` through the sanitiser, never markup.

Numbers are a host's too: whatever one sends (``1e308``, ``5e-324``, a percentage of a
total of ``1e-300``), a cell shows it in a few characters or as ``?``, and never raises.
"""

from __future__ import annotations

from rich.text import Text

# A host's numbers are present's (the health screen's GPUs, drawn there, show the same bars);
# the widgets take them from here.
from ddptui.present.numbers import FIGURE_CHARS as FIGURE_CHARS
from ddptui.present.numbers import UNKNOWN as UNKNOWN
from ddptui.present.numbers import bar as bar
from ddptui.present.numbers import figure as figure
from ddptui.present.numbers import percent as percent
from ddptui.present.numbers import share as share
from ddptui.untrusted import plain

ODD = "◆"
"""Marks a value that differs from the other hosts': a symbol as well as a colour."""


def cell(value: object, style: str = "", *, limit: int = 60) -> Text:
    """One value for a cell: one line, control characters as escapes, ``n/a`` when missing."""
    if value is None:
        return Text("n/a", style="dim")
    return Text(plain(str(value), limit=limit, one_line=True), style=style)


def odd_cell(value: object, odd: bool) -> Text:
    """A parity value; an odd one is marked by colour and by :data:`ODD`."""
    text = cell(value)
    if odd:
        text.stylize("bold red")
        text.append(f" {ODD}", style="bold red")
    return text


def number(value: float | None, spec: str, suffix: str = "") -> Text:
    """A cell for ``value`` (see :func:`figure`), ``–`` when there is none."""
    if value is None:
        return Text("–", style="dim")
    return Text(f"{figure(value, spec)}{suffix}", justify="right")


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
