"""The demo's fault: a node's ranks killed, as the OOM killer or a person would kill them, for
recovery to heal.

Every demo host is this machine, so a node's ranks are this machine's processes: those whose
environment names the node's run directory (``DDPTUI_RUN_DIR``, which every process of a run
inherits) and a ``RANK`` (which torchrun gives each worker and what it starts, never itself).
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from ddptui.layout import RUN_DIR_ENV

_PROC = Path("/proc")


def kill_ranks(root: Path, run_dir: str) -> list[int]:
    """SIGKILL every rank process of the node whose run directory is ``run_dir``; the ids of
    those killed. Only a run directory inside ``root`` (a demo cluster's) is looked for: the
    demo kills nothing of runs on other hosts."""
    if not Path(run_dir).is_relative_to(root):
        return []
    mark = f"{RUN_DIR_ENV}={run_dir}".encode()
    killed = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            # Gone since the listing, or another user's.
            continue
        if mark in environ and any(item.startswith(b"RANK=") for item in environ):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    return killed
