"""The node agent as a host runs it: its program on a Python's standard input."""

from __future__ import annotations

import json
import subprocess
import sys

from ddptui.remote.programs import agent_program


def agent(*args: str) -> dict[str, object]:
    """Run one agent command here; its JSON answer."""
    done = subprocess.run(
        [sys.executable, "-", *args],
        input=agent_program(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    document: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return document
