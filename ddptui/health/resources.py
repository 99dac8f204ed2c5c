"""What a host offers a run: its GPUs, the backend, processes per node, the socket interface.

Pure functions over the probe's facts, shared by the health findings and the launch plan so that
the check judges exactly what a launch will use.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Literal

from ddptui.config.model import Config, HostConfig
from ddptui.probe.facts import MAX_GPUS, NA, GpuFacts, HostFacts, IPAddress

BUSY_MEMORY_MIB = 1024
"""A GPU with this much memory in use is busy even when no process is listed (another container)."""


def is_free(gpu: GpuFacts) -> bool:
    """No compute process holds it and little memory is used. Unknown facts count as free."""
    if gpu.processes is not NA and gpu.processes:
        return False
    return gpu.memory_used_mib is NA or gpu.memory_used_mib < BUSY_MEMORY_MIB


def present_gpus(facts: HostFacts) -> tuple[GpuFacts, ...]:
    """The host's NVIDIA GPUs; torch's device count stands in when the driver tools are absent.

    No GPUs at all when it claims more than a host can have (:func:`implausible_gpu_count`).
    """
    if facts.gpus.source != "none":
        return facts.gpus.devices
    torch = facts.torch
    claimed = torch.device_count
    if torch.cuda_available is True and claimed is not NA and claimed <= MAX_GPUS:
        return tuple(GpuFacts(index=index) for index in range(claimed))
    return ()


def implausible_gpu_count(facts: HostFacts) -> int | None:
    """How many GPUs the host claims, when that is more than :data:`MAX_GPUS`: the devices NVML
    or nvidia-smi listed, or else torch's device count (the one :func:`present_gpus` goes by)."""
    if facts.gpus.source != "none":
        return facts.gpus.listed
    claimed = facts.torch.device_count
    if facts.torch.cuda_available is True and claimed is not NA and claimed > MAX_GPUS:
        return claimed
    return None


def selected_gpus(host: HostConfig, facts: HostFacts) -> tuple[GpuFacts, ...]:
    """The present GPUs that the host's ``gpus`` setting selects."""
    present = sorted(present_gpus(facts), key=lambda gpu: gpu.index)
    if host.gpus == "all":
        return tuple(present)
    if isinstance(host.gpus, int):
        return tuple(present[: host.gpus])
    return tuple(gpu for gpu in present if gpu.index in host.gpus)


def usable_gpus(host: HostConfig, facts: HostFacts) -> tuple[GpuFacts, ...]:
    """Selected GPUs, if torch on the host can use CUDA at all; else none."""
    return selected_gpus(host, facts) if facts.torch.cuda_available is True else ()


def procs_per_node(config: Config, host: HostConfig, facts: HostFacts) -> int:
    """Processes torchrun starts on the host: one per selected GPU, or the configured number."""
    nproc = config.job.nproc_per_node
    return len(selected_gpus(host, facts)) if nproc == "gpus" else nproc


def resolve_backend(config: Config, facts: Mapping[str, HostFacts]) -> Literal["nccl", "gloo"]:
    """The configured backend; for ``auto``, nccl when every host has a usable GPU, else gloo."""
    if config.cluster.backend != "auto":
        return config.cluster.backend
    for host in config.ordered_hosts:
        host_facts = facts.get(host.name)
        if host_facts is None or not usable_gpus(host, host_facts):
            return "gloo"
    return "nccl"


def choose_socket_ifname(host_facts: HostFacts, master_address: str) -> str | None:
    """The interface gloo/NCCL should use on this host to reach node 0 at ``master_address``.

    The interface holding that address (node 0 itself), else the one whose subnet contains it,
    the most specific subnet winning. A name stands for the address the host itself resolved
    it to, as its torchrun will. ``None`` when no subnet contains it, when the host did not
    report its interfaces, or when the name did not resolve there to a usable address.
    """
    target = master_target(host_facts, master_address)
    if target is None or host_facts.interfaces is NA:
        return None
    best: tuple[int, str] | None = None
    for interface in host_facts.interfaces:
        for network in interface.ipv4:
            if network.ip == target:
                return interface.name
            if target in network.network and (best is None or network.network.prefixlen > best[0]):
                best = (network.network.prefixlen, interface.name)
    return None if best is None else best[1]


def is_loopback_name(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def one_machine(config: Config) -> bool:
    """Every host is the same machine: there is one, or all are at loopback addresses.

    The second is one machine standing in for a cluster (``ddptui demo``, a rehearsal before
    the real hosts): gloo/NCCL traffic never leaves it, so loopback is what its ranks should
    use, and node 0 is at 127.0.0.1 for every host.
    """
    hosts = config.ordered_hosts
    return len(hosts) == 1 or all(is_loopback_name(host.address) for host in hosts)


def master_target(facts: HostFacts, master: str) -> IPAddress | None:
    """The address this host's torchrun reaches node 0 at, as far as interfaces are concerned.

    A name counts as what it resolved to on the host, IPv4 first (interfaces list IPv4 only).
    Loopback counts only for a loopback name such as ``localhost``: one machine standing in for
    a cluster. Anywhere else it is a stale /etc/hosts entry, and choosing ``lo`` for gloo/NCCL
    would make the host advertise loopback to its peers.
    """
    try:
        return ipaddress.ip_address(master)
    except ValueError:
        pass
    addresses = resolved_addresses(facts, master)
    if not is_loopback_name(master):
        addresses = tuple(address for address in addresses if not address.is_loopback)
    return min(addresses, key=lambda address: address.version, default=None)


def resolved_addresses(facts: HostFacts, master: str) -> tuple[IPAddress, ...]:
    resolution = facts.master
    if resolution is None or resolution.name != master:
        return ()
    return resolution.addresses
