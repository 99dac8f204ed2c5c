"""What every agent command shares: how it answers (one JSON document a line), how it writes a
file (atomically), and the names of the run's files and processes it looks for."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from importlib.abc import InspectLoader
from pathlib import Path
from typing import Any

MAX_LINE = 16384
"""Longer lines are cut (the rest up to the newline is skipped); the head caps them anyway."""


READ_CHUNK = 1 << 20


POLL_S = 0.25


HEARTBEAT_S = 2.0


SETTLED_S = 1.0


WAIT_POLL_S = 0.25


CACHE_DAYS = 14


# These two patterns are ddptui.run.layout's (this file cannot import it); a test keeps them equal.
FOLLOWED = re.compile(
    r"^(events/[^/]+\.jsonl"
    r"|logs/attempt-\d+/.+/(stdout|stderr)\.log"
    r"|logs/attempt-\d+/.+/error\.json"
    r"|node/attempt-\d+\.(out|exit))$"
)


RUN_MARK = "DDPTUI_RUN_DIR"


ATTEMPT_MARK = "DDPTUI_ATTEMPT"


STACKS_MARK = "DDPTUI_STACKS_DIR"


ATTEMPT_FILE = re.compile(r"^attempt-(\d+)\.(pgid|exit)$")


FLIGHT_FILE = re.compile(r"^flight_(\d{1,6})$")


def emit(document: dict[str, Any]) -> None:
    # Flushed at exit, or by ``follow`` once per round: a flush per line was a packet per line
    # on the SSH channel, which the head node pays for in CPU.
    sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")


def write_atomic(path: Path, text: str) -> None:
    # A name of its own: hosts that share the directory may write the same file at once.
    temporary = path.with_name(path.name + "." + os.urandom(4).hex() + ".tmp")
    temporary.write_text(text)
    temporary.replace(path)


def source_of(module: str) -> str:
    """The source of ``module`` (of this package), however it was loaded: from its file, or
    from the bundle the head sends (:mod:`ddptui.remote.programs`)."""
    spec = importlib.util.find_spec(module)
    loader = spec.loader if spec is not None else None
    source = loader.get_source(module) if isinstance(loader, InspectLoader) else None
    if source is None:
        raise ImportError(f"no source of {module}")
    return source
