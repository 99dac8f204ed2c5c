"""The node agent's GPU sample, what it costs a host a heartbeat: through NVML with its handles
kept open (the agent's way wherever pynvml is installed), against one ``nvidia-smi`` process a
heartbeat (its fallback, and its only way before the GPU's health counters).

By default both run on recorded doubles, side by side in one process: the pynvml double
answering as the recorded H200 and as the constructed 8-GPU H100 host (tests/fixtures/nvml),
and the nvidia-smi double replaying the recorded H200 (tests/fixtures/gpu). The doubles are
Python, so NVML's figure is the agent's own work plus a double's, not a driver's. On a GPU host,
``--real`` measures the driver's own NVML and nvidia-smi the same way
(``benchmarks/gpu_host.sh`` runs it).

    python benchmarks/gpu_sample.py [--samples 500] [--rounds 3] [--real] [--record FILE]

Each round takes ``--samples`` samples of each way, alternating ways round by round; printed:
CPU (this process and its children, user + system) and wall time per sample, the share of one
core that is at one sample every 2 s, and the ratio of NVML's CPU to nvidia-smi's.
``--record FILE`` also writes this host's NVML answers in the shape of tests/fixtures/nvml (a
recording of a real GPU for the pynvml double).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddptui.onhost.common import HEARTBEAT_S  # noqa: E402
from ddptui.onhost.follow import GpuSampler  # noqa: E402
from tests.fixtures.gpu import nvidia_smi_double  # noqa: E402
from tests.fixtures.nvml import pynvml_double  # noqa: E402


def cpu_now() -> float:
    """This process's CPU seconds and its waited-for children's, to the microsecond."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@contextmanager
def nvml_double(machine: str) -> Iterator[None]:
    module = types.ModuleType("pynvml")
    exec(compile(pynvml_double(machine), "pynvml.py", "exec"), module.__dict__)
    sys.modules["pynvml"] = module
    try:
        yield
    finally:
        del sys.modules["pynvml"]


@contextmanager
def no_nvml() -> Iterator[None]:
    sys.modules["pynvml"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        del sys.modules["pynvml"]


@contextmanager
def smi_double(fixture: str) -> Iterator[None]:
    with tempfile.TemporaryDirectory() as directory:
        smi = Path(directory) / "nvidia-smi"
        smi.write_text(nvidia_smi_double(fixture))
        smi.chmod(0o755)
        path = os.environ["PATH"]
        os.environ["PATH"] = f"{directory}{os.pathsep}{path}"
        try:
            yield
        finally:
            os.environ["PATH"] = path


def measure(setup: Callable[[], object], samples: int) -> tuple[float, float, int]:
    """CPU and wall seconds a sample, and the GPUs a sample had, over ``samples`` samples."""
    with setup():  # type: ignore[attr-defined]
        sampler = GpuSampler()
        gpus = len(sampler.sample() or ())
        cpu, wall = cpu_now(), time.perf_counter()
        for _ in range(samples):
            sampler.sample()
        return (cpu_now() - cpu) / samples, (time.perf_counter() - wall) / samples, gpus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--real", action="store_true", help="this host's NVML and nvidia-smi")
    parser.add_argument("--record", type=Path, help="write this host's NVML answers here")
    options = parser.parse_args()
    if options.record is not None:
        options.record.write_text(json.dumps(record_nvml(), indent=1) + "\n")
    if options.real:
        ways: dict[str, Callable[[], object]] = {"nvml": lambda: _nothing(), "nvidia-smi": no_nvml}
    else:
        ways = {
            "nvml (H200 double)": lambda: nvml_double("h200_idle"),
            "nvml (8×H100 double)": lambda: nvml_double("h100x8_faults"),
            "nvidia-smi (H200 double)": lambda: _both(no_nvml(), smi_double("h200_idle")),
        }
    found: dict[str, list[tuple[float, float, int]]] = {name: [] for name in ways}
    for round_ in range(options.rounds):
        order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
        for name in order:
            samples = options.samples if "smi" not in name else max(options.samples // 10, 20)
            found[name].append(measure(ways[name], samples))
    every = f"{HEARTBEAT_S:g} s"
    print(f"{options.rounds} rounds; median (range) a sample; share of a core at one every {every}")
    cpu_of = {}
    for name, rounds in found.items():
        cpus = sorted(cpu for cpu, _, _ in rounds)
        walls = sorted(wall for _, wall, _ in rounds)
        cpu_of[name] = statistics.median(cpus)
        wall = statistics.median(walls)
        print(
            f"  {name:26} {rounds[0][2]} GPU(s): CPU {1e3 * cpu_of[name]:.3f} ms "
            f"({1e3 * cpus[0]:.3f}–{1e3 * cpus[-1]:.3f}), wall {1e3 * wall:.3f} ms, "
            f"{100 * cpu_of[name] / HEARTBEAT_S:.3f}% of a core"
        )
    smi = next(value for name, value in cpu_of.items() if "smi" in name)
    for name, value in cpu_of.items():
        if "smi" not in name and smi > 0:
            print(f"  {name} / nvidia-smi: {value / smi:.3f}×")
    return 0


def record_nvml() -> dict[str, Any]:
    """This host's NVML answers to the calls the pynvml double replays (its README's keys)."""
    import pynvml

    def ask(call: str, *args: Any) -> Any:
        try:
            answer = getattr(pynvml, call)(*args)
        except Exception:
            return None
        return answer.decode() if isinstance(answer, bytes) else answer

    pynvml.nvmlInit()
    devices = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        memory = ask("nvmlDeviceGetMemoryInfo", handle)
        rates = ask("nvmlDeviceGetUtilizationRates", handle)
        bus = getattr(ask("nvmlDeviceGetPciInfo", handle), "busId", None)
        links = []
        for link in range(18):
            state = ask("nvmlDeviceGetNvLinkState", handle, link)
            if state is None:
                break
            errors = [ask("nvmlDeviceGetNvLinkErrorCounter", handle, link, c) for c in range(4)]
            links.append({"state": state, "errors": errors})
        pcie = {
            key: ask(call, handle)
            for key, call in (
                ("gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                ("gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                ("width", "nvmlDeviceGetCurrPcieLinkWidth"),
                ("width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
                ("replays", "nvmlDeviceGetPcieReplayCounter"),
            )
        }
        rows = ask("nvmlDeviceGetRemappedRows", handle)
        power = [
            ask("nvmlDeviceGetPowerUsage", handle),
            ask("nvmlDeviceGetEnforcedPowerLimit", handle),
        ]
        clocks = [
            ask("nvmlDeviceGetClockInfo", handle, 1),
            ask("nvmlDeviceGetMaxClockInfo", handle, 1),
        ]
        running = ask("nvmlDeviceGetComputeRunningProcesses", handle) or []
        devices.append(
            {
                "uuid": ask("nvmlDeviceGetUUID", handle),
                "name": ask("nvmlDeviceGetName", handle),
                "memory_bytes": None if memory is None else [memory.total, memory.used],
                "utilization_pct": None if rates is None else [rates.gpu, rates.memory],
                "processes": [
                    {
                        "pid": process.pid,
                        "name": ask("nvmlSystemGetProcessName", process.pid),
                        "used_bytes": process.usedGpuMemory,
                    }
                    for process in running
                ],
                "pci_bus_id": bus.decode() if isinstance(bus, bytes) else bus,
                "clocks_event_reasons": ask("nvmlDeviceGetCurrentClocksEventReasons", handle),
                "ecc_uncorrected_volatile": ask("nvmlDeviceGetTotalEccErrors", handle, 1, 0),
                "retired_pages_pending": ask("nvmlDeviceGetRetiredPagesPendingStatus", handle),
                "remapped_rows": None if rows is None else list(rows),
                "pcie": None if None in pcie.values() else pcie,
                "nvlinks": links or None,
                "temperature_c": ask("nvmlDeviceGetTemperature", handle, 0),
                "power_mw": None if None in power else power,
                "clocks_sm_mhz": None if None in clocks else clocks,
                "pstate": ask("nvmlDeviceGetPerformanceState", handle),
            }
        )
    cuda = ask("nvmlSystemGetCudaDriverVersion")
    driver = ask("nvmlSystemGetDriverVersion")
    pynvml.nvmlShutdown()
    return {"driver_version": driver, "cuda_driver_version": cuda, "devices": devices}


@contextmanager
def _nothing() -> Iterator[None]:
    yield


@contextmanager
def _both(first: object, second: object) -> Iterator[None]:
    with first, second:  # type: ignore[attr-defined]
        yield


if __name__ == "__main__":
    sys.exit(main())
