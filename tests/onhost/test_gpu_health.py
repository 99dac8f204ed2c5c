"""The GPU's own counters, read on the host: through NVML (the probe run for real with a
pynvml double answering as a recorded or constructed machine), and through nvidia-smi's CSV."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.onhost.gpu_health import SMI_HEALTH_FIELDS, SMI_REMAPPED_ROWS, smi_health
from ddptui.probe.facts import NA, GpuHealth, HostFacts
from tests.fixtures.nvml import gpu_count, pynvml_double
from tests.helpers import recorded_torch, run_probe


def _probed(tmp_path: Path, machine: str) -> HostFacts:
    files = {
        "torch/__init__.py": recorded_torch(device_count=gpu_count(machine)),
        "pynvml.py": pynvml_double(machine),
    }
    return run_probe(tmp_path, python_path=files, keep_path=False)[0]


def test_the_recorded_h200_is_healthy_and_says_what_it_does_not_support(tmp_path: Path) -> None:
    (gpu,) = _probed(tmp_path, "h200_idle").gpus.devices
    assert gpu.health == GpuHealth(
        pci_bus_id="0000:00:06",
        throttle_reasons=0x1,
        ecc_uncorrected=0,
        retired_pages_pending=NA,
        remapped_rows_uncorrectable=0,
        remapped_rows_pending=False,
        remap_failed=False,
        pcie_gen=5,
        pcie_gen_max=5,
        pcie_width=16,
        pcie_width_max=16,
        pcie_replays=0,
        nvlinks=NA,
    )


def test_each_fault_of_the_constructed_h100s_reaches_the_facts(tmp_path: Path) -> None:
    gpus = {gpu.index: gpu.health for gpu in _probed(tmp_path, "h100x8_faults").gpus.devices}
    assert gpus[0].throttle_reasons == 0x4 and gpus[0].nvlinks == 18 and not gpus[0].nvlinks_down
    assert gpus[1].throttle_reasons == 0x4 | 0x8 | 0x40
    assert (
        gpus[2].remapped_rows_uncorrectable,
        gpus[2].remapped_rows_pending,
        gpus[2].ecc_uncorrected,
    ) == (2, True, 2)
    assert (gpus[3].pcie_width, gpus[3].pcie_width_max, gpus[3].pcie_replays) == (8, 16, 117)
    assert gpus[4].nvlinks_down == (5,) and gpus[4].nvlink_errors == 0
    assert gpus[5].remap_failed is True
    assert gpus[6].nvlink_errors == 1234
    assert gpus[7].pci_bus_id == "0000:db:00"


CSV = "--format=csv,noheader,nounits"
# Shaped as nvidia-smi prints these queries: bus ids in NVML's form, the reasons in hex.
SMI_ANSWERS = {
    ("--query-gpu=" + SMI_HEALTH_FIELDS.format(reasons="clocks_event_reasons.active"), CSV): (
        "0, 00000000:18:00.0, 0x0000000000000001, 0, [N/A], 5, 5, 16, 16\n"
        "1, 00000000:2A:00.0, 0x0000000000000048, 3, [N/A], 4, 5, 8, 16\n"
    ),
    ("--query-remapped-rows=" + SMI_REMAPPED_ROWS, CSV): (
        "00000000:18:00.0, 0, 0, 0, 0\n00000000:2A:00.0, 0, 2, 1, 0\n"
    ),
}


def _smi(*args: str) -> str:
    try:
        return SMI_ANSWERS[args]
    except KeyError:
        raise RuntimeError("Field is not a valid field to query") from None


def test_nvidia_smi_says_the_same_counters_where_nvml_is_not_installed() -> None:
    found = smi_health(_smi)
    assert found[0] == {
        "pci_bus_id": "00000000:18:00.0",
        "throttle_reasons": 1,
        "ecc_uncorrected": 0,
        "pcie_gen": 5,
        "pcie_gen_max": 5,
        "pcie_width": 16,
        "pcie_width_max": 16,
        "remapped_rows_correctable": 0,
        "remapped_rows_uncorrectable": 0,
        "remapped_rows_pending": False,
        "remap_failed": False,
    }
    assert (found[1]["throttle_reasons"], found[1]["remapped_rows_pending"]) == (0x48, True)


def test_an_older_driver_s_name_for_the_reasons_is_asked_next() -> None:
    older = {
        (key[0].replace("clocks_event_reasons", "clocks_throttle_reasons"), CSV): value
        for key, value in SMI_ANSWERS.items()
    }
    found = smi_health(lambda *args: older[args])
    assert found[1]["throttle_reasons"] == 0x48


@pytest.mark.parametrize(
    "answer",
    ["", "garbage\n", "0, 1, 2\n", "x, 00000000:18:00.0, 0x1, 0, 0, 5, 5, 16, 16\n"],
)
def test_an_answer_that_is_not_the_query_s_is_nothing_known(answer: str) -> None:
    assert smi_health(lambda *args: answer) == {}
