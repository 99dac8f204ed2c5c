"""Training state to and from checkpoints: a collective snapshot and a broadcast restore.

Model and optimizer travel as full (unsharded) state dicts, so a checkpoint loads at any world
size. Under FSDP they come from torch.distributed.checkpoint's helpers, imported only then: they
pull in DTensor and sympy (over a second of start-up) and need a recent torch. Global rank 0 reads
the file and broadcasts, so no other node needs to see the checkpoint directory.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .checkpoint import CheckpointStore, Skipped, read_verified
from .dist import (
    Runtime,
    TrainerError,
    all_gather_object,
    broadcast_bytes,
    broadcast_object,
    decode,
)

FORMAT = 1


@dataclass
class Progress:
    step: int = 0
    epoch: int = 0
    # Micro-batches this rank has consumed in the current epoch.
    batch_in_epoch: int = 0


@dataclass(frozen=True)
class Shape:
    """What decides which samples a rank sees at a given step."""

    world_size: int
    batch_size: int
    grad_accum: int


@dataclass(frozen=True)
class Resumed:
    path: str
    progress: Progress
    exact: bool
    skipped: list[Skipped]


@dataclass
class Parts:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    fsdp: bool


def _rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _unwrapped(model: nn.Module) -> nn.Module:
    inner = model.module
    assert isinstance(inner, nn.Module)
    return inner


def _full_state(parts: Parts) -> tuple[dict[str, Any], dict[str, Any]]:
    """Collective under FSDP; complete on global rank 0 (the only one that uses it)."""
    if not parts.fsdp:
        return _unwrapped(parts.model).state_dict(), parts.optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_state_dict(parts.model, parts.optimizer, options=options)


def _load_full_state(parts: Parts, model: dict[str, Any], optimizer: dict[str, Any]) -> None:
    if not parts.fsdp:
        _unwrapped(parts.model).load_state_dict(model)
        parts.optimizer.load_state_dict(optimizer)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    set_state_dict(
        parts.model,
        parts.optimizer,
        model_state_dict=model,
        optim_state_dict=optimizer,
        options=StateDictOptions(full_state_dict=True),
    )


def snapshot(
    parts: Parts, progress: Progress, shape: Shape, rt: Runtime, config: dict[str, Any]
) -> dict[str, Any] | None:
    """Collective: every rank calls it; global rank 0 gets the whole state, the others None."""
    model_state, optim_state = _full_state(parts)
    rngs = all_gather_object(_rng_state(rt.device), rt.control_group)
    if rt.placement.rank != 0:
        return None
    return {
        "format": FORMAT,
        "fsdp": parts.fsdp,
        "model": model_state,
        "optimizer": optim_state,
        "scheduler": parts.scheduler.state_dict(),
        "scaler": parts.scaler.state_dict(),
        "progress": asdict(progress),
        "shape": asdict(shape),
        "rng": rngs,
        "config": config,
    }


def _read(spec: str, store: CheckpointStore) -> tuple[dict[str, Any], bytes] | None:
    """On global rank 0: what to resume from (description, state file bytes), None for fresh."""
    if spec == "latest":
        found = store.read_latest()
        if found is None:
            return None
        data, manifest, skipped = found
        path = store.directory / manifest.file
    else:
        path = Path(spec).with_suffix(".pt")
        data, manifest = read_verified(path.with_suffix(".json"))
        skipped = []
    return {"path": str(path), "skipped": [asdict(s) for s in skipped]}, data


def restore(
    spec: str, store: CheckpointStore, parts: Parts, shape: Shape, rt: Runtime, seed: int
) -> Resumed | None:
    """Collective: global rank 0 reads the checkpoint and broadcasts it; every rank applies it."""
    rank, group = rt.placement.rank, rt.control_group
    header: dict[str, Any] | None = None
    data = b""
    if rank == 0:
        try:
            found = _read(spec, store)
        except TrainerError as e:
            found = ({"error": str(e)}, b"")
        header, data = found if found is not None else ({"fresh": True}, b"")
    header = broadcast_object(header, group)
    assert header is not None
    if "error" in header:
        raise TrainerError(f"cannot resume: {header['error']}")
    if "fresh" in header:
        return None
    state = decode(broadcast_bytes(data if rank == 0 else None, group))
    if state.get("format") != FORMAT:
        raise TrainerError(f"{header['path']}: format {state.get('format')}, expected {FORMAT}")
    if state["fsdp"] != parts.fsdp:
        flag = "with" if state["fsdp"] else "without"
        raise TrainerError(f"{header['path']} was written by a run {flag} --fsdp; resume {flag} it")
    _load_full_state(parts, state["model"], state["optimizer"])
    parts.scheduler.load_state_dict(state["scheduler"])
    if state["scaler"]:
        parts.scaler.load_state_dict(state["scaler"])

    saved_shape = Shape(**state["shape"])
    progress = Progress(**state["progress"])
    exact = saved_shape == shape
    if exact:
        _set_rng_state(state["rng"][rank], rt.device)
    else:
        # Another sharding: keep the epoch and how many of its samples were consumed in all,
        # rounded down to whole steps; the sample order itself differs, so this is approximate.
        samples = progress.batch_in_epoch * saved_shape.batch_size * saved_shape.world_size
        per_step = shape.batch_size * shape.grad_accum * shape.world_size
        progress.batch_in_epoch = samples // per_step * shape.grad_accum
        torch.manual_seed(seed + 1 + rank + progress.step * shape.world_size)
    skipped = [Skipped(**s) for s in header["skipped"]]
    return Resumed(header["path"], progress, exact, skipped)
