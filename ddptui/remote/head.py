"""This machine's own Python, started safely: in its own module so that the command line can
start a process before it imports anything heavy (:mod:`ddptui.run.standby`)."""

from __future__ import annotations

import sys

HEAD_CWD = "/"
"""Where this machine's own interpreters start: a directory no other user can write, since
Python puts its start directory first on ``sys.path`` (before 3.11's ``-P``), and the caller's
(``/tmp``, a shared project folder) may hold a ``json.py`` or a ``ddptui/`` of someone else's."""


def head_python(*args: str) -> list[str]:
    """The argv that runs this machine's Python with ``args``, never importing from its working
    directory (``-P`` where Python has it; start it in :data:`HEAD_CWD` for older ones)."""
    return [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), *args]
