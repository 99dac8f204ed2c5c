"""The probe's torch section: torch as a fresh interpreter on the host sees it, asked in a
child with a deadline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from ddptui.onhost.probe_section import maybe

# Runs in a child interpreter: a broken CUDA install can hang or crash `import torch`,
# and the probe has to report that rather than suffer it.
TORCH_SNIPPET = r"""
import importlib.util, json, sys
if importlib.util.find_spec("torch") is None:
    print(json.dumps({"status": "missing"}))
    sys.exit(0)
import torch

def guarded(fn):
    try:
        return fn()
    except Exception:
        return None

# torch's flight recorder: each setting under the names this torch reads, newest first (they
# changed from TORCH_NCCL_* to TORCH_FR_*); looked for in its libraries rather than guessed.
FLIGHT_RECORDER = {
    "buffer": ["TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"],
    "dump_on_timeout": ["TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT"],
    "file": ["TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"],
}

def flight_recorder():
    import mmap, os
    found = {}
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    for library in ("libtorch_cpu.so", "libtorch_cuda.so"):
        path = os.path.join(lib, library)
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as handle, mmap.mmap(
            handle.fileno(), 0, access=mmap.ACCESS_READ
        ) as text:
            for role, names in FLIGHT_RECORDER.items():
                for name in names:
                    if role not in found and text.find(name.encode() + b"\0") >= 0:
                        found[role] = name
    return found

def nccl_version():
    version = torch.cuda.nccl.version()
    if isinstance(version, int):
        version = (version // 1000, version % 1000 // 100, version % 100)
    return ".".join(str(part) for part in version)

print(json.dumps({
    "status": "ok",
    "version": torch.__version__,
    "cuda": torch.version.cuda,
    "cuda_available": guarded(torch.cuda.is_available),
    "device_count": guarded(torch.cuda.device_count),
    "nccl": guarded(nccl_version),
    "nccl_available": guarded(torch.distributed.is_nccl_available),
    "gloo_available": guarded(torch.distributed.is_gloo_available),
    "flight_recorder": guarded(flight_recorder),
}))
"""


def start_torch() -> subprocess.Popen[bytes]:
    # Its own session, so a timeout kills the whole tree and no grandchild holds our pipes.
    return subprocess.Popen(
        [sys.executable, "-c", TORCH_SNIPPET],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def torch_section(child: subprocess.Popen[bytes], deadline: float) -> dict[str, Any]:
    try:
        out, err = child.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        maybe(os.killpg, child.pid, signal.SIGKILL)
        child.communicate()
        return {"status": "timeout", "detail": "import torch did not finish in time"}
    lines = out.decode("utf-8", "replace").strip().splitlines()
    if child.returncode == 0 and lines:
        try:
            return dict(json.loads(lines[-1]))
        except ValueError:
            pass
    errors = err.decode("utf-8", "replace").strip().splitlines()
    if child.returncode < 0:
        detail = f"import torch was killed by signal {-child.returncode}"
    else:
        detail = errors[-1] if errors else f"import torch exited with status {child.returncode}"
    return {"status": "error", "detail": detail}
