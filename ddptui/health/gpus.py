"""GPUs: which a host may use, which are free, the backend, and the findings about them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal

from ddptui.config.model import Config, HostConfig
from ddptui.health.findings import Code, Finding, Severity
from ddptui.health.resources import (
    implausible_gpu_count,
    is_free,
    present_gpus,
    procs_per_node,
    resolve_backend,
    selected_gpus,
    usable_gpus,
)
from ddptui.health.wording import hosts_list, plural
from ddptui.probe.facts import MAX_GPUS, NA, GpuFacts, HostFacts

SHOWN_DIGITS = 15
"""A claimed count of more digits is shown as "more than" this many: a host can send thousands."""


def gpu_findings(
    config: Config, probed: Sequence[tuple[HostConfig, HostFacts]]
) -> Iterator[Finding]:
    backend = resolve_backend(config, {host.name: facts for host, facts in probed})
    if config.cluster.backend == "auto" and len(probed) == len(config.hosts):
        yield _backend_choice(backend, probed)
    for host, facts in probed:
        yield from _host_gpu_findings(config, backend, host, facts)


def _backend_choice(
    backend: Literal["nccl", "gloo"], probed: Sequence[tuple[HostConfig, HostFacts]]
) -> Finding:
    if backend == "nccl":
        reason = "every host has a GPU torch can use"
    else:
        without = [host.name for host, facts in probed if not usable_gpus(host, facts)]
        reason = (
            f"{hosts_list(without)} {'has' if len(without) == 1 else 'have'} no GPU torch can use"
        )
    return Finding(
        Code.BACKEND_AUTO,
        Severity.INFO,
        None,
        f"backend = auto resolves to {backend}: {reason}",
        'set cluster.backend = "nccl" or "gloo" to choose explicitly',
    )


def _host_gpu_findings(
    config: Config, backend: str, host: HostConfig, facts: HostFacts
) -> Iterator[Finding]:
    claimed = implausible_gpu_count(facts)
    if claimed is not None:
        yield _implausible_count(host, facts, claimed)
    present = present_gpus(facts)
    selected = selected_gpus(host, facts)
    if _missing_selection(host, present):
        yield Finding(
            Code.GPU_SELECTION_MISSING,
            Severity.ERROR,
            host.name,
            f"gpus = {_setting(host)} on {host.name}, but it has {_gpu_list(present)}",
            f'set gpus for {host.name} to GPUs it has, or "all"',
        )
    if selected and facts.torch.ok and facts.torch.cuda_available is False:
        yield _torch_cannot_use_cuda(host, facts, len(selected))
    usable = usable_gpus(host, facts)
    if config.cluster.backend == "nccl" and not usable:
        yield Finding(
            Code.NCCL_WITHOUT_GPUS,
            Severity.ERROR,
            host.name,
            f"backend is nccl but {host.name} has no GPU torch can use; NCCL needs one per process",
            'set cluster.backend = "gloo" (or "auto"), or give this host working GPUs',
        )
    if config.job.nproc_per_node == "gpus" and not selected:
        yield Finding(
            Code.NPROC_GPUS_WITHOUT_GPUS,
            Severity.ERROR,
            host.name,
            f'job.nproc_per_node = "gpus" but {host.name} has no selected GPU, '
            "so it would start no processes",
            "set job.nproc_per_node to an integer (processes per host) when any host is CPU-only",
        )
    # Judged on the selected GPUs, not only those torch can use: a host whose torch is
    # fixed next should not then surprise anyone with GPUs another job holds.
    if backend == "nccl" and selected:
        yield from _busy_findings(host, selected, procs_per_node(config, host, facts))


def _busy_findings(host: HostConfig, usable: Sequence[GpuFacts], needed: int) -> Iterator[Finding]:
    free_gpus = [gpu for gpu in usable if is_free(gpu)]
    busy = [gpu for gpu in usable if not is_free(gpu)]
    free = len(free_gpus)
    held = "".join(f"; {_why_busy(gpu)}" for gpu in busy)
    if free < needed:
        yield Finding(
            Code.NOT_ENOUGH_FREE_GPUS,
            Severity.ERROR,
            host.name,
            f"{host.name} needs {plural(needed, 'free GPU')} but only {free} of its "
            f"{plural(len(usable), 'selected GPU')} {'is' if free == 1 else 'are'} free{held}",
            "wait for those processes to finish or stop them, select other GPUs with gpus = "
            "[…], or lower job.nproc_per_node",
        )
    elif busy:
        yield Finding(
            Code.GPU_BUSY,
            Severity.WARNING,
            host.name,
            f"{host.name} has busy GPUs, though enough are free for "
            f"{plural(needed, 'process', 'es')}{held}",
            f"leave the busy GPUs out with gpus = [{', '.join(str(g.index) for g in free_gpus)}] "
            f"on {host.name}",
        )


def _why_busy(gpu: GpuFacts) -> str:
    if gpu.processes is not NA and gpu.processes:
        holders = ", ".join(
            f"{proc.name if proc.name is not NA else 'unknown process'} (pid {proc.pid}"
            + (f", {proc.used_memory_mib} MiB)" if proc.used_memory_mib is not NA else ")")
            for proc in gpu.processes
        )
        return f"GPU {gpu.index} is held by {holders}"
    unlisted = "no process is listed" if gpu.processes is not NA else "processes are not listed"
    return f"GPU {gpu.index} has {gpu.memory_used_mib} MiB in use ({unlisted}: another container?)"


def _implausible_count(host: HostConfig, facts: HostFacts, claimed: int) -> Finding:
    said = "torch's device count" if facts.gpus.source == "none" else facts.gpus.source
    shown = f"{claimed:,}" if claimed < 10**SHOWN_DIGITS else f"more than {10**SHOWN_DIGITS:,}"
    return Finding(
        Code.GPU_COUNT_IMPLAUSIBLE,
        Severity.ERROR,
        host.name,
        f"{host.name} claims {shown} GPUs ({said}), more than any host can have "
        f"({MAX_GPUS}), so none of its GPUs are used",
        f"see what {host.name} itself reports (nvidia-smi -L; torch.cuda.device_count() in "
        "its python): its driver or torch is broken, or the answer was not the host's",
    )


def _torch_cannot_use_cuda(host: HostConfig, facts: HostFacts, count: int) -> Finding:
    torch = facts.torch
    if torch.cuda_build is None:
        why = f"torch {torch.version} is a CPU-only build"
        fix = "install a CUDA build of torch there (pip install torch --index-url "
        fix += "https://download.pytorch.org/whl/cu124, matching the other hosts)"
    else:
        why = (
            f"torch.cuda.is_available() is False (torch built for CUDA {torch.cuda_build}, "
            f"driver {facts.gpus.driver_version} supports CUDA {facts.gpus.cuda_driver_version})"
        )
        fix = "update the NVIDIA driver, or install a torch build for an older CUDA"
    return Finding(
        Code.TORCH_CUDA_UNAVAILABLE,
        Severity.WARNING,
        host.name,
        f"{host.name} has {plural(count, 'NVIDIA GPU')} but {why}",
        fix,
    )


def _missing_selection(host: HostConfig, present: Sequence[GpuFacts]) -> bool:
    if host.gpus == "all":
        return False
    if isinstance(host.gpus, int):
        return host.gpus > len(present)
    return not set(host.gpus) <= {gpu.index for gpu in present}


def _setting(host: HostConfig) -> str:
    return str(host.gpus) if isinstance(host.gpus, int) else f"[{', '.join(map(str, host.gpus))}]"


def _gpu_list(gpus: Sequence[GpuFacts]) -> str:
    if not gpus:
        return "no GPU"
    return f"GPU{'' if len(gpus) == 1 else 's'} {', '.join(str(gpu.index) for gpu in gpus)}"
