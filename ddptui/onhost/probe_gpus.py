"""The probe's GPU section: NVIDIA's devices, driver and compute processes, through NVML
where its Python bindings (``pynvml``) are installed, else through ``nvidia-smi``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from ddptui.onhost.gpu_health import nvml_health, smi_field, smi_health, smi_number, text
from ddptui.onhost.probe_section import COMMAND_TIMEOUT_S, SectionError, describe, maybe

QUERY_GPU_FIELDS = "index,uuid,name,memory.total,memory.used,utilization.gpu,driver_version"
QUERY_APPS_FIELDS = "gpu_uuid,pid,process_name,used_memory"
MIB = 1024 * 1024


def gpus_section() -> dict[str, Any]:
    problems = []
    for collect in (gpus_from_nvml, gpus_from_smi):
        try:
            result = collect()
        except SectionError as exc:
            problems.append(str(exc))
            continue
        except Exception as exc:
            problems.append(collect.__name__ + ": " + describe(exc))
            continue
        result["problem"] = "; ".join(problems)
        return result
    return {"source": "none", "devices": [], "problem": "; ".join(problems)}


def gpus_from_nvml() -> dict[str, Any]:
    try:
        import pynvml
    except ImportError:
        raise SectionError("pynvml is not installed") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        raise SectionError("pynvml: " + describe(exc)) from None
    try:
        cuda = maybe(pynvml.nvmlSystemGetCudaDriverVersion)
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = maybe(pynvml.nvmlDeviceGetMemoryInfo, handle)
            utilization = maybe(pynvml.nvmlDeviceGetUtilizationRates, handle)
            running = maybe(pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
            processes = None
            if running is not None:
                processes = [
                    {
                        "pid": proc.pid,
                        "name": text(maybe(pynvml.nvmlSystemGetProcessName, proc.pid))
                        or process_name(proc.pid),
                        "used_memory_mib": None
                        if proc.usedGpuMemory is None
                        else proc.usedGpuMemory // MIB,
                    }
                    for proc in running
                ]
            devices.append(
                {
                    "index": index,
                    "uuid": text(maybe(pynvml.nvmlDeviceGetUUID, handle)),
                    "name": text(maybe(pynvml.nvmlDeviceGetName, handle)),
                    "memory_total_mib": None if memory is None else memory.total // MIB,
                    "memory_used_mib": None if memory is None else memory.used // MIB,
                    "utilization_pct": None if utilization is None else utilization.gpu,
                    "processes": processes,
                    "health": nvml_health(pynvml, handle),
                }
            )
        return {
            "source": "nvml",
            "driver_version": text(maybe(pynvml.nvmlSystemGetDriverVersion)),
            "cuda_driver_version": None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
            "devices": devices,
        }
    finally:
        maybe(pynvml.nvmlShutdown)


def process_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def nvidia_smi(*args: str) -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=COMMAND_TIMEOUT_S,
        )
    except FileNotFoundError:
        raise SectionError("nvidia-smi not found") from None
    except subprocess.TimeoutExpired:
        raise SectionError(f"nvidia-smi did not answer in {COMMAND_TIMEOUT_S:.0f} s") from None
    output = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0:
        first = output.strip().splitlines()[:1]
        reason = first[0] if first else f"exited with status {done.returncode}"
        raise SectionError("nvidia-smi: " + reason)
    return output


def gpus_from_smi() -> dict[str, Any]:
    csv = "--format=csv,noheader,nounits"
    gpu_lines = nvidia_smi("--query-gpu=" + QUERY_GPU_FIELDS, csv).strip().splitlines()
    try:
        apps: list[str] | None = (
            nvidia_smi("--query-compute-apps=" + QUERY_APPS_FIELDS, csv).strip().splitlines()
        )
    except SectionError:
        apps = None
    processes: dict[str, list[dict[str, Any]]] = {}
    for line in apps or []:
        parts = line.split(", ")
        pid = smi_number(parts[1]) if len(parts) >= 4 else None
        if pid is None:
            continue
        processes.setdefault(parts[0].strip(), []).append(
            {
                "pid": pid,
                "name": smi_field(", ".join(parts[2:-1])),
                "used_memory_mib": smi_number(parts[-1]),
            }
        )
    health = smi_health(nvidia_smi)
    devices = []
    driver = None
    for line in gpu_lines:
        parts = line.split(", ")
        index = smi_number(parts[0]) if len(parts) >= 7 else None
        if index is None:
            continue
        uuid = smi_field(parts[1])
        total, used, utilization, driver_field = parts[-4:]
        driver = driver or smi_field(driver_field)
        devices.append(
            {
                "index": index,
                "uuid": uuid,
                "name": smi_field(", ".join(parts[2:-4])),
                "memory_total_mib": smi_number(total),
                "memory_used_mib": smi_number(used),
                "utilization_pct": smi_number(utilization),
                "processes": None if apps is None else processes.get(uuid or "", []),
                "health": health.get(index, {}),
            }
        )
    return {
        "source": "nvidia-smi",
        "driver_version": driver,
        "cuda_driver_version": smi_cuda_version(),
        "devices": devices,
    }


def smi_cuda_version() -> str | None:
    """The CUDA driver version is only in plain ``nvidia-smi``'s banner."""
    try:
        banner = nvidia_smi()
    except SectionError:
        return None
    match = re.search(r"CUDA Version:\s*([0-9][0-9.]*)", banner)
    return match.group(1) if match else None
