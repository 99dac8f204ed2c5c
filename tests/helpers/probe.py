"""The probe script run for real on this machine, with stand-ins for nvidia-smi and torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddptui.probe import PROBE_SOURCE, probe_args
from ddptui.probe.facts import HostFacts
from ddptui.probe.parse import parse_facts
from tests.fixtures.gpu import nvidia_smi_double

PROBE_RECORDINGS = Path(__file__).resolve().parents[1] / "fixtures" / "probe"


def torch_recording(fixture: str = "h200_idle_nvml") -> dict[str, Any]:
    """The torch section of a real GPU host's probe output, ``fixtures/probe/<fixture>.json``."""
    document = json.loads((PROBE_RECORDINGS / f"{fixture}.json").read_text())
    section: dict[str, Any] = document["torch"]
    return section


def recorded_torch(fixture: str = "h200_idle_nvml", *, device_count: int | None = None) -> str:
    """A stand-in ``torch/__init__.py`` giving the probe the answers torch gave on the host
    recorded in ``fixture``; ``device_count``, where given, is the number of GPUs the test's
    nvidia-smi or NVML double lists, so torch and the driver agree as they do on one host.

    A CUDA build of torch cannot be installed here, and the real ``import torch`` costs seconds:
    this one imports instantly, so only one test pays for the real import.
    """
    section = torch_recording(fixture)
    count = section["device_count"] if device_count is None else device_count
    # torch's is_available is whether it counts a device: none where the driver lists none.
    available = section["cuda_available"] and count > 0
    # torch.cuda.nccl.version() gives a tuple; the probe joined it with dots.
    nccl = tuple(int(part) for part in section["nccl"].split("."))
    version, cuda = section["version"], section["cuda"]
    nccl_available, gloo_available = section["nccl_available"], section["gloo_available"]
    return f"""
import types
__version__ = {version!r}
version = types.SimpleNamespace(cuda={cuda!r})
cuda = types.SimpleNamespace(
    is_available=lambda: {available!r},
    device_count=lambda: {count!r},
    nccl=types.SimpleNamespace(version=lambda: {nccl!r}),
)
distributed = types.SimpleNamespace(
    is_nccl_available=lambda: {nccl_available!r}, is_gloo_available=lambda: {gloo_available!r}
)
"""


def write_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        # Rewriting a file as it is would be an upgrade to the torch facts' cache.
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return root


def run_probe(tmp_path: Path, **options: Any) -> tuple[HostFacts, float]:
    """Run the probe script under the venv's Python (:func:`probe_output`'s ``options``);
    return its facts and wall time.

    Run again with the same ``tmp_path``, it finds the workdir of the runs before.
    """
    started = time.monotonic()
    output = probe_output(tmp_path, **options)
    return parse_facts(output), time.monotonic() - started


def probe_output(
    tmp_path: Path,
    *,
    python_path: dict[str, str],
    smi_fixture: str | None = None,
    keep_path: bool = True,
    extra_args: tuple[str, ...] = (),
    torch_timeout: float = 20.0,
    extra_env: Mapping[str, str] = {},
) -> str:
    """What the probe script prints under the venv's Python (see :func:`run_probe`)."""
    fakes = write_package(tmp_path / "site", python_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").unlink(missing_ok=True)
    if smi_fixture is not None:
        (bin_dir / "nvidia-smi").write_text(nvidia_smi_double(smi_fixture))
        (bin_dir / "nvidia-smi").chmod(0o755)
    env = dict(os.environ, PYTHONPATH=str(fakes), HANG_PID_FILE=str(tmp_path / "hang.pid"))
    env.update(extra_env)
    env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}" if keep_path else str(bin_dir)
    args = probe_args(str(tmp_path / "work"), torch_timeout=torch_timeout) + list(extra_args)
    done = subprocess.run(
        [sys.executable, "-", *args],
        input=PROBE_SOURCE,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return done.stdout
