"""The probe's program run for real, on this machine: the whole document, from a host with
real torch and from one with nothing (no nvidia-smi, no ``ip``, a broken torch)."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

from ddptui.probe import probe_args
from ddptui.probe.facts import NA
from tests.helpers import run_probe

BROKEN_TORCH = 'raise ImportError("libcudart.so.12: cannot open shared object file")\n'


def test_probe_args() -> None:
    assert probe_args("~/runs") == ["--workdir", "~/runs", "--torch-timeout", "20"]
    assert probe_args("/w", master_port=29500, torch_timeout=2.5) == [
        "--workdir",
        "/w",
        "--torch-timeout",
        "2.5",
        "--master-port",
        "29500",
    ]
    assert probe_args("/w", master_addr="gpu-a")[-2:] == ["--master-addr", "gpu-a"]


def test_real_host_with_real_torch(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("", 0))
        listener.listen()
        busy_port = listener.getsockname()[1]
        facts, _ = run_probe(tmp_path, python_path={}, extra_args=("--master-port", str(busy_port)))
    assert facts.section_errors == {}
    assert facts.torch.status == "ok"
    assert facts.torch.version == "2.13.0+cpu"
    assert facts.torch.cuda_build is None
    assert facts.torch.cuda_available is False
    assert facts.torch.gloo_available is True
    # Read from this torch's libraries: the CPU build has no NCCL watchdog to dump on timeout.
    assert facts.torch.flight_recorder == {
        "buffer": "TORCH_FR_BUFFER_SIZE",
        "file": "TORCH_FR_DUMP_TEMP_FILE",
    }
    assert facts.hostname == socket.gethostname()
    assert facts.python.executable == sys.executable
    assert facts.interfaces is not NA
    assert "lo" in {interface.name for interface in facts.interfaces}
    assert facts.disk.checked_path == str(tmp_path)
    assert facts.disk.free_bytes is not NA and facts.disk.free_bytes > 0
    assert facts.pip_packages is not NA and facts.pip_packages["torch"] == "2.13.0+cpu"
    assert facts.memory_total_bytes is not NA and facts.memory_available_bytes is not NA
    assert 0 < facts.memory_available_bytes <= facts.memory_total_bytes
    assert facts.port is not None and facts.port.port == busy_port
    assert facts.port.in_use is True
    assert facts.time is not NA and abs(facts.time - time.time()) < 60


def test_no_nvidia_smi_no_ip_and_broken_torch(tmp_path: Path) -> None:
    facts, _ = run_probe(tmp_path, python_path={"torch/__init__.py": BROKEN_TORCH}, keep_path=False)
    assert facts.gpus.source == "none"
    assert facts.gpus.devices == ()
    assert "nvidia-smi not found" in facts.gpus.problem
    assert facts.torch.status == "error"
    assert "libcudart.so.12" in facts.torch.detail
    # Without `ip` on PATH the interfaces come from ioctl.
    assert facts.interfaces is not NA
    loopback = {interface.name: interface for interface in facts.interfaces}["lo"]
    assert [str(network) for network in loopback.ipv4] == ["127.0.0.1/8"]
