"""Process group set-up from torchrun's environment (or a one-process group when run alone)."""

from __future__ import annotations

import ctypes
import io
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


class TrainerError(Exception):
    """A problem the user can fix (arguments, data, environment); reported without a traceback."""


@dataclass(frozen=True)
class Placement:
    """Where this process sits in the job, as torchrun describes it."""

    rank: int
    local_rank: int
    node_rank: int
    world_size: int
    local_world_size: int
    under_torchrun: bool

    @classmethod
    def from_env(cls) -> Placement:
        env = os.environ
        if "RANK" not in env:
            return cls(0, 0, 0, 1, 1, under_torchrun=False)
        return cls(
            rank=int(env["RANK"]),
            local_rank=int(env["LOCAL_RANK"]),
            node_rank=int(env.get("GROUP_RANK", "0")),
            world_size=int(env["WORLD_SIZE"]),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", "1")),
            under_torchrun=True,
        )


@dataclass(frozen=True)
class Runtime:
    placement: Placement
    backend: str
    device: torch.device
    # Control traffic (stop flags, small objects) stays on a CPU group so that it
    # never forces a device synchronisation.
    control_group: dist.ProcessGroup | None


def choose_backend(requested: str, placement: Placement) -> str:
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if requested == "auto":
        return "nccl" if gpus >= placement.local_world_size else "gloo"
    if requested == "nccl" and gpus < placement.local_world_size:
        raise TrainerError(
            f"--backend nccl needs one GPU per local rank: {placement.local_world_size} local "
            f"ranks, {gpus} GPUs visible"
        )
    return requested


def start(requested_backend: str, timeout_s: float) -> Runtime:
    placement = Placement.from_env()
    backend = choose_backend(requested_backend, placement)
    if backend == "nccl":
        torch.cuda.set_device(placement.local_rank)
        device = torch.device("cuda", placement.local_rank)
    else:
        device = torch.device("cpu")
    timeout = timedelta(seconds=timeout_s)
    if placement.under_torchrun:
        dist.init_process_group(backend, timeout=timeout)
    else:
        # Standalone debugging: a real (in-process) one-rank group keeps a single code path.
        dist.init_process_group(
            backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout
        )
    control = None if backend == "gloo" else dist.new_group(backend="gloo", timeout=timeout)
    return Runtime(placement, backend, device, control)


def stop() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


FLIGHT_DUMP_FILES = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
"""Where a launcher (ddptui) asks torch to dump the flight recorder: rank appended."""


def dump_flight_recorder(rank: int) -> None:
    """After a failure, this rank's flight recorder (its last collectives) where the launcher
    asked for it. NCCL's watchdog writes it on a timeout; gloo has none, so a failed collective
    leaves no trace of what each rank last entered unless the rank writes it. Best effort: the
    error on its way up is what counts."""
    prefix = next((os.environ[name] for name in FLIGHT_DUMP_FILES if os.environ.get(name)), None)
    if prefix is None or not dist.is_initialized():
        return
    path = Path(f"{prefix}{rank}")
    try:
        import torch._C._distributed_c10d as c10d

        # NCCL keeps a recorder of its own (the one its watchdog dumps); _dump_fr_trace's
        # holds none of NCCL's collectives.
        nccl = dist.get_backend() == "nccl" and hasattr(c10d, "_dump_nccl_trace")
        data = (c10d._dump_nccl_trace if nccl else c10d._dump_fr_trace)(True, True, False)
        if not data or path.exists():
            return
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_bytes(data)
        partial.replace(path)
    except Exception:
        return


# torch's *_object_list collectives need NumPy, which a host may lack; these need only torch.


def _serialize(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def tensor_bytes(tensor: torch.Tensor, size: int | None = None) -> bytes:
    """The first ``size`` bytes (default: all) of a CPU ``uint8`` tensor, copied in one go:
    ``bytes(tensor.untyped_storage())`` goes element by element in Python, minutes for the
    checkpoint of a small model."""
    flat = tensor.detach().contiguous()
    assert flat.dtype == torch.uint8 and flat.device.type == "cpu"
    count = flat.numel() if size is None else min(size, flat.numel())
    return ctypes.string_at(flat.data_ptr(), count) if count else b""


def decode(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def broadcast_bytes(data: bytes | None, group: dist.ProcessGroup | None) -> bytes:
    """From global rank 0 (which passes the data) to every rank."""
    size = torch.tensor([0 if data is None else len(data)], dtype=torch.int64)
    dist.broadcast(size, src=0, group=group)
    if data is not None:
        payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    else:
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
    if payload.numel():
        dist.broadcast(payload, src=0, group=group)
    return data if data is not None else tensor_bytes(payload)


def broadcast_object(obj: Any, group: dist.ProcessGroup | None) -> Any:
    """``obj`` (tensors, containers, str, numbers) from global rank 0; others pass None."""
    data = _serialize(obj) if dist.get_rank() == 0 else None
    return decode(broadcast_bytes(data, group))
