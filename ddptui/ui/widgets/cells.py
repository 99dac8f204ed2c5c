"""Host values as table cells: always ``Text`` through the sanitiser, never markup."""

from __future__ import annotations

from rich.text import Text

from ddptui.probe.facts import NA, Maybe
from ddptui.untrusted import plain

ODD = "◆"
"""Marks a value that differs from the other hosts': a symbol as well as a colour."""


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


def number(value: float | None, spec: str, suffix: str = "") -> Text:
    if value is None:
        return Text("–", style="dim")
    return Text(f"{value:{spec}}{suffix}", justify="right")


def bar(used: float, total: float, width: int = 12) -> Text:
    """``used``/``total`` as a bar of ``width`` cells followed by the percentage."""
    share = 0.0 if total <= 0 else min(max(used / total, 0.0), 1.0)
    filled = round(share * width)
    style = "red" if share > 0.9 else "yellow" if share > 0.5 else "green"
    return Text.assemble(
        ("█" * filled, style), ("░" * (width - filled), "dim"), f" {share * 100:3.0f}%"
    )
