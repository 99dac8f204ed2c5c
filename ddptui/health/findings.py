"""The health check's vocabulary: what goes in (one ``HostCheck`` per host) and what comes out."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ddptui.config.model import HostConfig
from ddptui.probe.facts import HostFacts
from ddptui.remote.status import Reachability


class Severity(enum.Enum):
    """How bad a finding is: any ``ERROR`` makes ``ddptui check`` exit 1."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Code(str, enum.Enum):
    """Stable finding codes; scripts and tests match on these values."""

    HOST_UNREACHABLE = "host_unreachable"
    SSH_AUTH_FAILED = "ssh_auth_failed"
    SSH_KEY_UNUSABLE = "ssh_key_unusable"
    HOST_KEY_UNKNOWN = "host_key_unknown"
    HOST_KEY_CHANGED = "host_key_changed"
    HOST_KEY_REVOKED = "host_key_revoked"
    PYTHON_MISSING = "python_missing"
    PROBE_FAILED = "probe_failed"
    PROBE_INCOMPLETE = "probe_incomplete"
    TORCH_MISSING = "torch_missing"
    TORCH_IMPORT_TIMEOUT = "torch_import_timeout"
    TORCH_BROKEN = "torch_broken"
    DRIVER_MISMATCH = "driver_mismatch"
    CUDA_DRIVER_MISMATCH = "cuda_driver_mismatch"
    TORCH_MISMATCH = "torch_mismatch"
    TORCH_CUDA_MISMATCH = "torch_cuda_mismatch"
    NCCL_MISMATCH = "nccl_mismatch"
    PYTHON_MISMATCH = "python_mismatch"
    PACKAGE_DRIFT = "package_drift"
    CONDA_PACKAGE_DRIFT = "conda_package_drift"
    BACKEND_AUTO = "backend_auto"
    NCCL_WITHOUT_GPUS = "nccl_without_gpus"
    TORCH_CUDA_UNAVAILABLE = "torch_cuda_unavailable"
    GPU_SELECTION_MISSING = "gpu_selection_missing"
    NPROC_GPUS_WITHOUT_GPUS = "nproc_gpus_without_gpus"
    NOT_ENOUGH_FREE_GPUS = "not_enough_free_gpus"
    GPU_BUSY = "gpu_busy"
    GPU_COUNT_IMPLAUSIBLE = "gpu_count_implausible"
    GPU_XID = "gpu_xid"
    KERNEL_LOG_UNREADABLE = "kernel_log_unreadable"
    GPU_MEMORY_PENDING_RESET = "gpu_memory_pending_reset"
    GPU_ECC_UNCORRECTED = "gpu_ecc_uncorrected"
    GPU_THROTTLED = "gpu_throttled"
    GPU_PCIE_DEGRADED = "gpu_pcie_degraded"
    GPU_NVLINK = "gpu_nvlink"
    HOSTNAME_LOOPBACK = "hostname_loopback"
    HOSTNAME_UNRESOLVABLE = "hostname_unresolvable"
    SOCKET_IFNAME_CHOSEN = "socket_ifname_chosen"
    SOCKET_IFNAME_UNDETERMINED = "socket_ifname_undetermined"
    SOCKET_IFNAME_MISSING = "socket_ifname_missing"
    SOCKET_IFNAME_OFF_SUBNET = "socket_ifname_off_subnet"
    MASTER_UNRESOLVABLE = "master_unresolvable"
    MASTER_RESOLVES_TO_LOOPBACK = "master_resolves_to_loopback"
    MASTER_ADDRESS_MISMATCH = "master_address_mismatch"
    MASTER_PORT_IN_USE = "master_port_in_use"
    MASTER_PORT_UNUSABLE = "master_port_unusable"
    MASTER_PORT_UNREACHABLE = "master_port_unreachable"
    LOW_DISK = "low_disk"
    CLOCK_SKEW = "clock_skew"
    NPROC_OVER_MEMORY = "nproc_over_memory"
    NPROC_OVER_FREE_MEMORY = "nproc_over_free_memory"
    NPROC_OVER_CPUS = "nproc_over_cpus"
    WORKDIR_SHARED = "workdir_shared"
    WORKDIR_UNSAFE = "workdir_unsafe"
    SLURM_PARTITION_MISSING = "slurm_partition_missing"
    SLURM_NODE_UNAVAILABLE = "slurm_node_unavailable"
    SLURM_TOO_FEW_NODES = "slurm_too_few_nodes"


@dataclass(frozen=True)
class Finding:
    """One problem (or notable fact) with a plain-language message and a concrete fix."""

    code: Code
    severity: Severity
    host: str | None
    """The host's name, or ``None`` for a cluster-wide finding."""
    message: str
    hint: str

    def to_json(self) -> dict[str, str | None]:
        """The ``ddptui check --json`` form: ``{"code", "severity", "host", "message", "hint"}``."""
        return {
            "code": self.code.value,
            "severity": self.severity.value,
            "host": self.host,
            "message": self.message,
            "hint": self.hint,
        }


@dataclass(frozen=True)
class ProbeFailure:
    """Why a host that SSH reached gave no facts: the probe's own failure, as it reported it.

    Its text came from the host and is already safe to print (:mod:`ddptui.untrusted`).
    """

    reason: str
    exit_status: int | None = None
    """``None`` when the probe never exited (it timed out)."""
    stderr_tail: str = ""
    """The last lines the probe wrote to stderr."""


@dataclass(frozen=True)
class HostCheck:
    """Everything the head node learned about one host: the input to :func:`evaluate`."""

    host: HostConfig
    reach: Reachability
    facts: HostFacts | None = None
    """``None`` unless ``reach.ok`` and the probe's output parsed."""
    clock_offset_s: float | None = None
    """Host clock minus head clock, measured by the caller."""
    master_port_reachable: bool | None = None
    """Workers only: could it TCP-connect to node 0's test listener; ``None`` = not tested."""
    probe_failure: ProbeFailure | None = None
    """Set when SSH and the interpreter worked but the probe did not produce facts."""
    workdir_shared_with: tuple[str, ...] = ()
    """The other hosts that see the files this one writes in its workdir (shared storage)."""
    connected_at: float | None = None
    probed_at: float | None = None
    """When SSH reached the host and when its probe answered (head clock, Unix seconds): the
    launch timeline's first stages."""
    probe_output: str = field(default="", repr=False)
    """The probe's output as it came, once parsed: what a later launch reads again when it
    stands on this check (:mod:`ddptui.check.reuse`)."""
