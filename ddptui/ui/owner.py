"""What a screen reaches through the app that owns it, without importing the app (which imports
the screens): the console's one :class:`~ddptui.run.control.RunControl`."""

from __future__ import annotations

from typing import Any

from textual.app import App

from ddptui.run.control import RunControl


def control_of(app: App[Any]) -> RunControl:
    """``app``'s RunControl: the one way a screen checks, launches, measures and trusts."""
    control = getattr(app, "control", None)
    if not isinstance(control, RunControl):
        raise TypeError(f"{type(app).__name__} holds no RunControl")
    return control
