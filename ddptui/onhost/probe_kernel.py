"""The probe's kernel-log section: the NVIDIA driver's Xid lines since boot (``dmesg``), where
this user may read the kernel log; where it may not (``kernel.dmesg_restrict``), why not.

Only the lines the driver marks ``NVRM: Xid`` are sent, the newest :data:`MAX_XID_LINES`, each
cut to :data:`MAX_LINE_CHARS`: a kernel log holds megabytes of what is none of ddptui's
business. Everything else about them is read on the head node."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from ddptui.onhost.common import XID_MARK
from ddptui.onhost.probe_section import COMMAND_TIMEOUT_S

MAX_XID_LINES = 32
MAX_LINE_CHARS = 512
RESTRICT = Path("/proc/sys/kernel/dmesg_restrict")


def kernel_log_section() -> dict[str, Any]:
    dmesg = shutil.which("dmesg") or shutil.which("dmesg", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if dmesg is None:
        return {"readable": False, "why": "dmesg is not installed"}
    try:
        done = subprocess.run([dmesg], capture_output=True, timeout=COMMAND_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return {"readable": False, "why": f"dmesg did not answer in {COMMAND_TIMEOUT_S:g} s"}
    except OSError as error:
        return {"readable": False, "why": f"dmesg could not run: {error.strerror or error}"}
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        why = said[-1][:MAX_LINE_CHARS] if said else f"dmesg exited {done.returncode}"
        return {"readable": False, "why": why, "restricted": _restricted()}
    lines = [
        line[:MAX_LINE_CHARS]
        for line in done.stdout.decode("utf-8", "replace").splitlines()
        if XID_MARK in line
    ]
    return {"readable": True, "xid_lines": lines[-MAX_XID_LINES:], "xid_count": len(lines)}


def _restricted() -> bool | None:
    """Whether ``kernel.dmesg_restrict`` keeps the kernel log from users (None: unknown)."""
    try:
        return RESTRICT.read_text().strip() == "1"
    except (OSError, UnicodeDecodeError):
        return None
