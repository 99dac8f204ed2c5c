"""The probe's GPU section run for real, with doubles for nvidia-smi (recorded answers) and
pynvml."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.health import Code, HostCheck, evaluate
from ddptui.onhost.probe_gpus import QUERY_APPS_FIELDS, QUERY_GPU_FIELDS
from ddptui.probe.facts import NA, HostFacts
from ddptui.remote.status import Reach, Reachability
from tests.fixtures import nvml
from tests.fixtures.gpu import DOUBLE, FIXTURES, gpu_count
from tests.helpers import recorded_torch, run_probe


def test_fixtures_were_recorded_with_the_probes_queries() -> None:
    double = ast.parse(DOUBLE.read_text())
    recorded = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in double.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }
    assert recorded["QUERY_GPU"] == "--query-gpu=" + QUERY_GPU_FIELDS
    assert recorded["QUERY_APPS"] == "--query-compute-apps=" + QUERY_APPS_FIELDS


def test_pynvml_is_preferred_and_its_gaps_are_not_available(tmp_path: Path) -> None:
    facts, _ = run_probe(
        tmp_path,
        python_path={
            "torch/__init__.py": recorded_torch(device_count=nvml.gpu_count("h100x2_gaps")),
            "pynvml.py": nvml.pynvml_double("h100x2_gaps"),
        },
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
            torch = recorded_torch(device_count=gpu_count(fixture))
            cache[fixture] = run_probe(
                tmp, python_path={"torch/__init__.py": torch}, smi_fixture=fixture
            )[0]
        return cache[fixture]

    return probe


WORKING_DRIVERS = [
    ("h200_idle", "580.159.04", "13.0", 1, "NVIDIA H200"),
    ("h200_busy", "580.159.04", "13.0", 1, "NVIDIA H200"),
    ("h100x8_idle", "550.54.15", "12.4", 8, "NVIDIA H100 80GB HBM3"),
    ("h100x8_driver535", "535.104.05", "12.2", 8, "NVIDIA H100 80GB HBM3"),
    ("a100x2_busy", "535.161.08", "12.2", 2, "NVIDIA A100-SXM4-40GB"),
    ("na_fields", "535.129.03", "12.2", 2, "NVIDIA A100-SXM4-80GB"),
]
"""The recorded machines whose driver answers: fixture, driver, CUDA, GPUs, their name."""


@pytest.mark.parametrize(("fixture", "driver", "cuda", "count", "name"), WORKING_DRIVERS)
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
    """A machine recorded is read by the fallback's test, or is the one without a driver."""
    assert {row[0] for row in WORKING_DRIVERS} | {"no_driver"} == set(FIXTURES)


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
