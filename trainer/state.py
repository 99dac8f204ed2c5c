"""Training state to and from checkpoints: a collective snapshot and a broadcast restore.

Model and optimizer travel as full (unsharded) state dicts, so a checkpoint loads at any world
size. Under FSDP they come from torch.distributed.checkpoint's helpers, imported only then: they
pull in DTensor and sympy (over a second of start-up) and need a recent torch. Global rank 0 reads
the file and broadcasts, so no other node needs to see the checkpoint directory.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .checkpoint import CheckpointStore, Skipped, read_verified
from .dist import (
    Runtime,
    TrainerError,
    broadcast_bytes,
    broadcast_object,
    decode,
)

FORMAT = 3
"""Format 1 counted this rank's micro-batches of the epoch, a position only its own shape knew;
format 2 kept every rank's random state, which dropout's draws now no longer need (they are
seeded per rank and step), so that one rank alone can write a whole checkpoint (a rescue)."""


@dataclass
class Progress:
    step: int = 0
    epoch: int = 0
    # Samples of the epoch's global order consumed by all ranks together: the same position at
    # any world size, and always a whole number of global batches.
    samples_in_epoch: int = 0


@dataclass(frozen=True)
class Shape:
    """What decides which samples a rank sees at a given step."""

    world_size: int
    batch_size: int
    grad_accum: int

    @property
    def global_batch(self) -> int:
        return self.world_size * self.batch_size * self.grad_accum


def resume_shape(saved: Shape, world_size: int, batch_size: int, grad_accum: int) -> Shape:
    """This run's shape for a checkpoint written at ``saved``: the same global batch over
    ``world_size`` ranks, in micro-batches of at most ``batch_size``, with the fewest
    micro-batches from ``grad_accum`` up.

    Keeping the global batch keeps the steps' samples, the steps per epoch and with them the
    learning-rate schedule.
    """
    size = saved.global_batch
    if size % world_size:
        fits = ", ".join(str(n) for n in range(1, size + 1) if size % n == 0)
        raise TrainerError(
            f"the checkpoint's global batch of {size} samples does not split over {world_size} "
            f"ranks: resume on a number of ranks that divides {size} ({fits})"
        )
    per_rank = size // world_size
    for accum in range(grad_accum, per_rank + 1):
        if per_rank % accum == 0 and per_rank // accum <= batch_size:
            return Shape(world_size, per_rank // accum, accum)
    raise TrainerError(
        f"the checkpoint's global batch of {size} samples over {world_size} ranks is {per_rank} "
        f"per rank, fewer than --grad-accum {grad_accum} micro-batches: resume with "
        f"--grad-accum {per_rank} or less"
    )


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint as every rank received it, before any of it is applied."""

    path: str
    format: int
    state: dict[str, Any]
    shape: Shape
    progress: Progress
    skipped: list[Skipped]


@dataclass(frozen=True)
class Resumed:
    path: str
    progress: Progress
    shape: Shape
    """The shape the checkpoint was written at."""
    exact: bool
    reordered: bool
    """Written mid-epoch in format 1, whose order differed: the rest of the epoch is drawn from
    today's order, so it may repeat or miss samples of the epoch."""
    skipped: list[Skipped]


@dataclass
class Parts:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    fsdp: bool


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
    """Collective under FSDP: every rank calls it; global rank 0 gets the whole state, the
    others None."""
    model_state, optim_state = _full_state(parts)
    if rt.placement.rank != 0:
        return None
    return whole_state(parts, progress, shape, config, model_state, optim_state)


def local_state(
    parts: Parts, progress: Progress, shape: Shape, config: dict[str, Any]
) -> dict[str, Any]:
    """The whole state as this rank holds it, with no collective: DDP only (a rescue)."""
    assert not parts.fsdp, "under FSDP no rank holds the whole state"
    model_state, optim_state = _full_state(parts)
    return whole_state(parts, progress, shape, config, model_state, optim_state)


def whole_state(
    parts: Parts,
    progress: Progress,
    shape: Shape,
    config: dict[str, Any],
    model_state: dict[str, Any],
    optim_state: dict[str, Any],
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "fsdp": parts.fsdp,
        "model": model_state,
        "optimizer": optim_state,
        "scheduler": parts.scheduler.state_dict(),
        "scaler": parts.scaler.state_dict(),
        "progress": asdict(progress),
        "shape": asdict(shape),
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


def saved_progress(state: dict[str, Any]) -> Progress:
    """A checkpoint's progress, counted as this trainer counts it, from either format."""
    progress = dict(state["progress"])
    if state["format"] == 1:
        shape = Shape(**state["shape"])
        batches = progress.pop("batch_in_epoch")
        progress["samples_in_epoch"] = batches * shape.batch_size * shape.world_size
    return Progress(**progress)


def load(spec: str, store: CheckpointStore, fsdp: bool, rt: Runtime) -> Checkpoint | None:
    """Collective: global rank 0 reads the checkpoint and broadcasts it; None for a fresh start."""
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
    if state.get("format") not in (1, 2, FORMAT):
        raise TrainerError(
            f"{header['path']}: format {state.get('format')}, expected {FORMAT} (or 1, 2)"
        )
    if state["fsdp"] != fsdp:
        flag = "with" if state["fsdp"] else "without"
        raise TrainerError(f"{header['path']} was written by a run {flag} --fsdp; resume {flag} it")
    skipped = [Skipped(**s) for s in header["skipped"]]
    shape = Shape(**state["shape"])
    return Checkpoint(header["path"], state["format"], state, shape, saved_progress(state), skipped)


def restore(checkpoint: Checkpoint, parts: Parts, shape: Shape) -> Resumed:
    """Every rank applies the checkpoint to ``parts``, built for this run's ``shape``."""
    state = checkpoint.state
    _load_full_state(parts, state["model"], state["optimizer"])
    parts.scheduler.load_state_dict(state["scheduler"])
    if state["scaler"]:
        parts.scaler.load_state_dict(state["scaler"])
    progress = checkpoint.progress
    return Resumed(
        checkpoint.path,
        progress,
        checkpoint.shape,
        exact=checkpoint.shape == shape and checkpoint.format >= 2,
        reordered=checkpoint.format == 1 and progress.samples_in_epoch > 0,
        skipped=checkpoint.skipped,
    )
