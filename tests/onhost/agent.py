"""The node agent as a host runs it: its program on a Python's standard input."""

from __future__ import annotations

import json
import subprocess
import sys

from ddptui.remote.programs import agent_program


def agent(*args: str, sent: object = None, umask: int = -1) -> dict[str, object]:
    """Run one agent command here, with ``sent`` as its ``SENT`` and ``umask`` (-1: this
    process's); its JSON answer."""
    done = subprocess.run(
        [sys.executable, "-", *args],
        input=agent_program(sent),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        umask=umask,
    )
    document: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return document
