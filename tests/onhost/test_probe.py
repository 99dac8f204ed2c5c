"""The probe script run for real, on this machine, with doubles for nvidia-smi, pynvml and torch."""

from __future__ import annotations

import ast
import ipaddress
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.health import Code, HostCheck, evaluate
from ddptui.onhost import probe as probe_script
from ddptui.probe import PROBE_SOURCE, probe_args
from ddptui.probe.facts import NA, HostFacts
from ddptui.remote.status import Reach, Reachability
from tests.fixtures.gpu import DOUBLE, FIXTURES
from tests.helpers import CUDA_TORCH, run_probe

BROKEN_TORCH = 'raise ImportError("libcudart.so.12: cannot open shared object file")\n'
HANGING_TORCH = """
import os, sys, time
with open(os.environ["HANG_PID_FILE"], "w") as f:
    f.write(str(os.getpid()))
time.sleep(60)
"""
# Mirrors pynvml's API for the calls the probe makes; bytes where pynvml returns bytes.
FAKE_PYNVML = """
import types
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlSystemGetDriverVersion(): return "550.54.15"
def nvmlSystemGetCudaDriverVersion(): return 12040
def nvmlDeviceGetCount(): return 2
def nvmlDeviceGetHandleByIndex(index): return index
def nvmlDeviceGetUUID(handle): return "GPU-fake-%d" % handle
def nvmlDeviceGetName(handle): return "NVIDIA H100 80GB HBM3"
def nvmlDeviceGetMemoryInfo(handle):
    return types.SimpleNamespace(total=81559 * 2**20, used=(0, 40000 * 2**20)[handle])
def nvmlDeviceGetUtilizationRates(handle):
    if handle == 0:
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
    return types.SimpleNamespace(gpu=87)
def nvmlDeviceGetComputeRunningProcesses(handle):
    if handle == 0:
        return []
    return [types.SimpleNamespace(pid=4242, usedGpuMemory=None)]
def nvmlSystemGetProcessName(pid): return b"/usr/bin/python3"
"""


def test_source_parses_as_python_3_8() -> None:
    ast.parse(PROBE_SOURCE, feature_version=(3, 8))


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


def test_fixtures_were_recorded_with_the_probes_queries() -> None:
    double = ast.parse(DOUBLE.read_text())
    recorded = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in double.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }
    assert recorded["QUERY_GPU"] == "--query-gpu=" + probe_script.QUERY_GPU_FIELDS
    assert recorded["QUERY_APPS"] == "--query-compute-apps=" + probe_script.QUERY_APPS_FIELDS


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


def test_hanging_torch_is_a_timeout_and_is_killed(tmp_path: Path) -> None:
    facts, elapsed = run_probe(
        tmp_path, python_path={"torch/__init__.py": HANGING_TORCH}, torch_timeout=1.0
    )
    assert facts.torch.status == "timeout"
    assert elapsed < 10
    pid = int((tmp_path / "hang.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


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


COUNTED = 'open(__import__("os").environ["TORCH_IMPORTS"], "a").write("import\\n")\n'
"""Prepended to a stand-in torch: each import leaves a line in the file $TORCH_IMPORTS names."""


def test_torch_facts_are_kept_until_what_they_depend_on_changes(tmp_path: Path) -> None:
    imports = tmp_path / "imports"

    def probe(fixture: str = "a100x2_busy", **env: str) -> tuple[HostFacts, int]:
        facts, _ = run_probe(
            tmp_path,
            python_path={"torch/__init__.py": COUNTED + CUDA_TORCH},
            smi_fixture=fixture,
            extra_env={"TORCH_IMPORTS": str(imports), **env},
        )
        return facts, imports.read_text().count("import")

    first, imported = probe()
    assert imported == 1 and first.torch.ok and first.torch.device_count == 2
    kept = tmp_path / "work" / probe_script.TORCH_CACHE_DIR / f"torch-{socket.gethostname()}.json"
    assert kept.is_file()
    again, imported = probe()
    assert imported == 1 and again.torch == first.torch
    # Other GPUs made visible, or torch upgraded: imported afresh.
    assert probe(CUDA_VISIBLE_DEVICES="1")[1] == 2
    assert probe(CUDA_VISIBLE_DEVICES="1")[1] == 2
    (tmp_path / "site" / "torch" / "version.py").write_text("cuda = '12.4'\n")
    assert probe()[1] == 3
    # A newer ddptui asks torch more: what an older one kept is not reused.
    kept.write_text(kept.read_text().replace('"snippet": "', '"snippet": "0'))
    assert probe()[1] == 4
    # The driver gone: two GPUs kept but none listed, so torch is asked each time.
    for expected in (5, 6):
        gone, imported = probe("no_driver")
        assert imported == expected and gone.torch.ok


def test_a_failed_torch_import_is_not_kept(tmp_path: Path) -> None:
    imports = tmp_path / "imports"
    for expected in (1, 2):
        facts, _ = run_probe(
            tmp_path,
            python_path={"torch/__init__.py": COUNTED + BROKEN_TORCH},
            extra_env={"TORCH_IMPORTS": str(imports)},
        )
        assert facts.torch.status == "error"
        assert imports.read_text().count("import") == expected


@pytest.mark.parametrize(
    ("name", "resolves"),
    [("localhost", True), ("127.0.0.1", True), ("no-such-host.invalid", False)],
    ids=["name", "address", "unresolvable"],
)
def test_master_address_is_resolved_on_the_host(tmp_path: Path, name: str, resolves: bool) -> None:
    facts, elapsed = run_probe(
        tmp_path, python_path={"torch/__init__.py": CUDA_TORCH}, extra_args=("--master-addr", name)
    )
    master = facts.master
    assert master is not None and master.name == name
    if resolves:
        assert ipaddress.ip_address("127.0.0.1") in master.addresses
        assert master.error == ""
    else:
        assert master.addresses == ()
        # The resolver's own answer, or the probe's deadline where DNS does not answer at all.
        assert master.error.startswith(("gaierror: ", "timed out after"))
    assert "master" not in facts.section_errors
    assert elapsed < probe_script.RESOLVE_TIMEOUT_S + 10


def test_without_master_address_there_is_no_lookup(tmp_path: Path) -> None:
    facts, _ = run_probe(tmp_path, python_path={"torch/__init__.py": CUDA_TORCH})
    assert facts.master is None


def test_a_stalled_resolver_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """getaddrinfo has no timeout; the probe gives up on it instead of hanging with it."""
    release = threading.Event()

    def stalled(*args: object) -> list[object]:
        release.wait(10)
        raise OSError("released")

    monkeypatch.setattr(probe_script, "RESOLVE_TIMEOUT_S", 0.2)
    monkeypatch.setattr(probe_script.socket, "getaddrinfo", stalled)
    started = time.monotonic()
    try:
        section = probe_script.Lookup("gpu-a").section()
    finally:
        release.set()
    assert time.monotonic() - started < 2
    assert section == {"name": "gpu-a", "error": "timed out after 0.2 s"}


def test_pynvml_is_preferred_and_its_gaps_are_not_available(tmp_path: Path) -> None:
    facts, _ = run_probe(
        tmp_path,
        python_path={"torch/__init__.py": CUDA_TORCH, "pynvml.py": FAKE_PYNVML},
        smi_fixture="a100x2_busy",
    )
    gpus = facts.gpus
    assert (gpus.source, gpus.driver_version, gpus.cuda_driver_version) == (
        "nvml",
        "550.54.15",
        "12.4",
    )
    first, second = gpus.devices
    assert first.utilization_pct is NA
    assert first.processes == ()
    assert (second.memory_used_mib, second.utilization_pct) == (40000, 87)
    assert second.processes is not NA
    (process,) = second.processes
    assert (process.pid, process.name, process.used_memory_mib) == (4242, "/usr/bin/python3", NA)


@pytest.fixture(scope="module")
def smi_facts(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], HostFacts]:
    cache: dict[str, HostFacts] = {}

    def probe(fixture: str) -> HostFacts:
        if fixture not in cache:
            tmp = tmp_path_factory.mktemp(fixture)
            cache[fixture] = run_probe(
                tmp, python_path={"torch/__init__.py": CUDA_TORCH}, smi_fixture=fixture
            )[0]
        return cache[fixture]

    return probe


@pytest.mark.parametrize(
    ("fixture", "driver", "cuda", "count", "name"),
    [
        ("h200_idle", "580.159.04", "13.0", 1, "NVIDIA H200"),
        ("h200_busy", "580.159.04", "13.0", 1, "NVIDIA H200"),
        ("h100x8_idle", "550.54.15", "12.4", 8, "NVIDIA H100 80GB HBM3"),
        ("h100x8_driver535", "535.104.05", "12.2", 8, "NVIDIA H100 80GB HBM3"),
        ("a100x2_busy", "535.161.08", "12.2", 2, "NVIDIA A100-SXM4-40GB"),
        ("na_fields", "535.129.03", "12.2", 2, "NVIDIA A100-SXM4-80GB"),
    ],
)
def test_nvidia_smi_fallback(
    smi_facts: Callable[[str], HostFacts],
    fixture: str,
    driver: str,
    cuda: str,
    count: int,
    name: str,
) -> None:
    gpus = smi_facts(fixture).gpus
    assert gpus.source == "nvidia-smi"
    assert "pynvml" in gpus.problem
    assert (gpus.driver_version, gpus.cuda_driver_version) == (driver, cuda)
    assert [gpu.index for gpu in gpus.devices] == list(range(count))
    assert {gpu.name for gpu in gpus.devices} == {name}
    assert all(gpu.uuid is not NA and gpu.uuid.startswith("GPU-") for gpu in gpus.devices)


def test_recorded_busy_h200_names_its_process(smi_facts: Callable[[str], HostFacts]) -> None:
    (idle,) = smi_facts("h200_idle").gpus.devices
    assert (idle.memory_total_mib, idle.memory_used_mib, idle.processes) == (143771, 0, ())
    (busy,) = smi_facts("h200_busy").gpus.devices
    assert (busy.memory_used_mib, busy.utilization_pct) == (21007, 0)
    assert busy.processes is not NA
    (process,) = busy.processes
    assert (process.pid, process.name, process.used_memory_mib) == (529, "python3", 20998)


def test_nvidia_smi_busy_gpu_names_its_process(smi_facts: Callable[[str], HostFacts]) -> None:
    idle, busy = smi_facts("a100x2_busy").gpus.devices
    assert (idle.memory_used_mib, idle.processes) == (4, ())
    assert (busy.memory_total_mib, busy.memory_used_mib, busy.utilization_pct) == (40960, 30817, 98)
    assert busy.processes is not NA
    (process,) = busy.processes
    assert (process.pid, process.name, process.used_memory_mib) == (
        48213,
        "/opt/conda/bin/python",
        30806,
    )


def test_nvidia_smi_na_fields_are_not_available(smi_facts: Callable[[str], HostFacts]) -> None:
    mig, other = smi_facts("na_fields").gpus.devices
    assert (mig.memory_used_mib, mig.utilization_pct, mig.memory_total_mib) == (NA, NA, 81920)
    assert mig.processes is not NA
    assert mig.processes[0].used_memory_mib is NA
    assert (other.memory_used_mib, other.utilization_pct) == (13, NA)


def test_nvidia_smi_driver_failure_is_the_no_driver_fact(
    smi_facts: Callable[[str], HostFacts],
) -> None:
    gpus = smi_facts("no_driver").gpus
    assert (gpus.source, gpus.devices, gpus.driver_version) == ("none", (), NA)
    assert "couldn't communicate with the NVIDIA driver" in gpus.problem


def test_every_fixture_is_exercised() -> None:
    assert set(FIXTURES) == {
        "h200_idle",
        "h200_busy",
        "h100x8_idle",
        "h100x8_driver535",
        "a100x2_busy",
        "na_fields",
        "no_driver",
    }


def _checks(*pairs: tuple[HostConfig, HostFacts]) -> list[HostCheck]:
    return [HostCheck(host, Reachability(Reach.OK), facts) for host, facts in pairs]


def test_health_over_recorded_gpus(smi_facts: Callable[[str], HostFacts]) -> None:
    """Findings from real probe output: the busy A100 and the driver parity of two H100 hosts."""
    a, b = HostConfig("gpu-a", "10.0.0.1"), HostConfig("gpu-b", "10.0.0.2")
    config = Config(Path("hosts.toml"), ClusterConfig(), (a, b), JobConfig())
    findings = evaluate(
        config, _checks((a, smi_facts("a100x2_busy")), (b, smi_facts("h100x8_idle")))
    )
    busy = [f for f in findings if f.code is Code.NOT_ENOUGH_FREE_GPUS]
    assert [f.host for f in busy] == ["gpu-a"]
    assert "/opt/conda/bin/python (pid 48213, 30806 MiB)" in busy[0].message

    findings = evaluate(
        config, _checks((a, smi_facts("h100x8_idle")), (b, smi_facts("h100x8_driver535")))
    )
    mismatched = {(f.code, f.host) for f in findings}
    assert (Code.DRIVER_MISMATCH, "gpu-b") in mismatched
    assert (Code.CUDA_DRIVER_MISMATCH, "gpu-b") in mismatched
    assert Code.NOT_ENOUGH_FREE_GPUS not in {f.code for f in findings}
