"""The probe's sections on the interpreter and the machine: the Python that runs it, the
packages it sees (pip's and conda's), the CPUs and the memory."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from ddptui.onhost.probe_section import maybe


def python_section() -> dict[str, Any]:
    prefix = Path(sys.prefix)
    is_conda = (prefix / "conda-meta").is_dir()
    conda_env = None
    if is_conda:
        conda_env = prefix.name if prefix.parent.name == "envs" else "base"
    return {
        "version": ".".join(str(part) for part in sys.version_info[:3]),
        "implementation": sys.implementation.name,
        "executable": sys.executable,
        "prefix": sys.prefix,
        "is_conda": is_conda,
        "conda_env": conda_env,
    }


def system_section() -> dict[str, Any]:
    memory = maybe(lambda: os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return {
        "cpu_count": os.cpu_count(),
        "memory_total_bytes": memory,
        "memory_available_bytes": maybe(memory_available),
    }


def memory_available() -> int | None:
    """The kernel's estimate of what new processes can take without swapping (Linux ≥ 3.14)."""
    with Path("/proc/meminfo").open("rb") as meminfo:
        for line in meminfo:
            if line.startswith(b"MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def packages_section() -> dict[str, Any]:
    import importlib.metadata

    pip: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        # The first one found wins, as it does for imports.
        if name and normalize(name) not in pip:
            pip[normalize(name)] = dist.version
    conda = None
    meta = Path(sys.prefix) / "conda-meta"
    if meta.is_dir():
        conda = {}
        # Records are named NAME-VERSION-BUILD.json; parsing the name is much faster than
        # loading records that list every installed file.
        for record in meta.glob("*.json"):
            parts = record.stem.rsplit("-", 2)
            if len(parts) == 3:
                conda[normalize(parts[0])] = parts[1]
    return {"pip": pip, "conda": conda}
