"""What the last successful ``import torch`` reported, kept in the workdir and reused while
nothing it depends on has changed."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

from ddptui.onhost.common import make_dirs, write_atomic
from ddptui.onhost.probe_section import SectionError, maybe, read_kept
from ddptui.onhost.probe_torch import TORCH_SNIPPET

TORCH_CACHE_DIR = "probe-cache"
"""Under the workdir: what the last ``import torch`` reported, per host, kept while nothing it
depends on changed. The import costs seconds of CPU (tens on a network filesystem) on every
check, launch and resume, and its answer rarely changes."""
MAX_KEPT_BYTES = 1024 * 1024
"""A kept answer is a few KiB; a longer file is not one of ours and is not read whole."""
TORCH_CACHE_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
)
"""What decides which GPUs and libraries torch finds, besides its files."""


def torch_fingerprint() -> dict[str, Any] | None:
    """What the torch facts depend on; None where torch is not found (which costs no import).

    A pip install or removal changes the site-packages directory, an upgrade of torch its files;
    a driver change or a GPU gone changes /proc and /dev.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    package = Path(spec.origin).parent

    def stamp(path: Path) -> list[int]:
        found = path.stat()
        return [found.st_ino, found.st_size, found.st_mtime_ns]

    watched = (package / "__init__.py", package / "version.py", package / "lib", package.parent)
    driver = maybe(lambda: Path("/proc/driver/nvidia/version").read_text().splitlines()[:1])
    return {
        # What the snippet asks torch changes with ddptui: kept answers to older questions lack
        # the newer facts.
        "snippet": hashlib.sha256(TORCH_SNIPPET.encode()).hexdigest(),
        "host": socket.gethostname(),
        "executable": os.path.realpath(sys.executable),
        "python": sys.version,
        "files": {str(path): maybe(stamp, path) for path in watched},
        "env": {name: os.environ.get(name) for name in TORCH_CACHE_ENV},
        "driver": driver,
        "devices": sorted(path.name for path in Path("/dev").glob("nvidia*")),
    }


def torch_cache_path(workdir: str) -> Path:
    # Per host: hosts that share a workdir (an NFS home) have GPUs of their own.
    name = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())[:200]
    return Path(workdir).expanduser() / TORCH_CACHE_DIR / f"torch-{name}.json"


def cached_torch(workdir: str, fingerprint: Any) -> dict[str, Any] | None:
    if not isinstance(fingerprint, dict):
        return None
    try:
        text, _ = read_kept(torch_cache_path(workdir), MAX_KEPT_BYTES)
        kept = json.loads(text)
    except (OSError, ValueError, SectionError):
        return None
    if not isinstance(kept, dict) or kept.get("fingerprint") != fingerprint:
        return None
    facts = kept.get("facts")
    return facts if isinstance(facts, dict) and facts.get("status") == "ok" else None


def keep_torch(workdir: str, fingerprint: Any, facts: dict[str, Any]) -> None:
    """Only a successful import is kept: a failure is looked at again on the next probe."""
    if not isinstance(fingerprint, dict) or facts.get("status") != "ok":
        return
    path = torch_cache_path(workdir)
    with contextlib.suppress(OSError):
        make_dirs(path.parent)
        write_atomic(path, json.dumps({"fingerprint": fingerprint, "facts": facts}))


def agrees_with_gpus(facts: dict[str, Any], gpus: Any) -> bool:
    """Kept facts count only while torch's device count matches the GPUs listed now: a GPU
    fallen off the bus or a broken driver must be seen by a fresh import."""
    listed = gpus.get("devices") if isinstance(gpus, dict) else None
    return (facts.get("device_count") or 0) == (len(listed) if isinstance(listed, list) else 0)
