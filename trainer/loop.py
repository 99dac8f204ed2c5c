"""The training loop: build task, model and optimizer; step; log; checkpoint; stop on request."""

from __future__ import annotations

import contextlib
import math
import os
import platform
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from .checkpoint import CheckpointStore
from .cli import Config
from .control import Control
from .data import CharText, Shards, SyntheticRegression, Task
from .dist import Runtime, TrainerError, broadcast_object
from .events import BufferPool, DeviceScalars, EventLog, finite, memory_mib
from .models import MLP, CharTransformer
from .rescue import Rescuer
from .state import (
    Parts,
    Progress,
    Resumed,
    Shape,
    load,
    local_state,
    restore,
    resume_shape,
    snapshot,
)


@dataclass(frozen=True)
class Outcome:
    step: int
    reason: str


def lr_factor(step: int, *, warmup: int, total: int, floor: float) -> float:
    """Linear warm-up to 1, then a cosine down to ``floor`` at ``total`` steps."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _load_task(cfg: Config, rt: Runtime) -> Task:
    if cfg.data is None:
        return SyntheticRegression(cfg.samples, cfg.seed)
    # Rank 0 reads and broadcasts, so the text need only exist on node 0.
    read: dict[str, str] | None = None
    if rt.placement.rank == 0:
        try:
            read = {"text": cfg.data.read_text(encoding="utf-8")}
        except (OSError, UnicodeDecodeError) as e:
            read = {"error": f"--data {cfg.data}: {e}"}
    read = broadcast_object(read, rt.control_group)
    assert read is not None
    if "error" in read:
        raise TrainerError(read["error"])
    return CharText(read["text"], cfg.block_size)


def _build_model(cfg: Config, task: Task) -> nn.Module:
    if isinstance(task, CharText):
        if cfg.width % cfg.heads:
            raise TrainerError(f"--width {cfg.width} is not a multiple of --heads {cfg.heads}")
        return CharTransformer(
            len(task.vocab), cfg.width, cfg.depth, cfg.heads, cfg.block_size, cfg.dropout
        )
    return MLP(task.in_dim, cfg.width, cfg.depth, task.out_dim)  # type: ignore[attr-defined]


def _shard(model: nn.Module, cfg: Config, rt: Runtime) -> nn.Module:
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
    except ImportError as e:
        raise TrainerError(
            f"--fsdp needs torch.distributed.fsdp.fully_shard (torch ≥ 2.6); "
            f"this is torch {torch.__version__}"
        ) from e
    if cfg.precision == "fp16":
        raise TrainerError("--fsdp supports --precision fp32 or bf16, not fp16")
    try:
        mesh = init_device_mesh(rt.device.type, (rt.placement.world_size,))
        for layer in model.layers:  # type: ignore[union-attr]
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    except (RuntimeError, ValueError, NotImplementedError) as e:
        raise TrainerError(
            f"--fsdp is not supported by torch {torch.__version__} on {rt.device} "
            f"with {rt.backend}: {e}"
        ) from e
    return model


# Reusable: entering and leaving it does nothing, so one serves every step.
_NO_CONTEXT = contextlib.nullcontext()


def _grad_sync(model: nn.Module, enabled: bool) -> contextlib.AbstractContextManager[None]:
    """Skip the gradient all-reduce (or reduce-scatter) on non-final micro-batches."""
    if isinstance(model, DistributedDataParallel):
        return _NO_CONTEXT if enabled else model.no_sync()
    model.set_requires_gradient_sync(enabled)  # type: ignore[operator]
    return _NO_CONTEXT


def _autocast(
    cfg: Config, device: torch.device
) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    if cfg.precision == "fp32":
        return lambda: _NO_CONTEXT
    dtype = torch.bfloat16 if cfg.precision == "bf16" else torch.float16
    # One instance, entered every micro-step: building one asks whether CUDA is available and
    # supports bf16 (device-count queries and an import lookup), a profiled cost on fast GPU steps.
    context = torch.autocast(device.type, dtype=dtype)
    return lambda: context


def _place_data(task: Task, device: torch.device) -> bool:
    """Move the in-memory data set onto a GPU when it takes under a quarter of the free memory.

    Then a batch is gathered on the device from device indices, instead of indexed on the CPU
    and copied from pageable memory (a synchronous copy) every step.
    """
    if device.type != "cuda":
        return False
    free, _ = torch.cuda.mem_get_info(device)
    if task.nbytes > free // 4:
        return False
    task.to(device)
    return True


def _settle_buckets(
    model: DistributedDataParallel, task: Task, rt: Runtime, on_device: bool
) -> None:
    """One forward and backward whose gradients are thrown away, so every real step all-reduces
    through the bucket layout DDP rebuilds after its first iteration.

    DDP reduces the first iteration's gradients in one bucket in parameter order, then rebuilds
    the buckets in the order gradients became ready. With three or more ranks the two layouts
    sum in different orders and round differently, so a resumed run's first step would not
    repeat the uninterrupted run's step bit for bit. No parameter, optimizer state, data
    position or random draw changes here.
    """
    devices = [rt.device] if rt.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        indices = torch.arange(1, device=rt.device if on_device else None)
        x, y = task.batch(indices)
        x, y = x.to(rt.device), y.to(rt.device)
        task.loss(model(x), y).backward()
    model.zero_grad(set_to_none=True)


class Trainer:
    def __init__(self, cfg: Config, rt: Runtime, log: EventLog) -> None:
        self.cfg, self.rt, self.log = cfg, rt, log
        p = rt.placement
        # First, so that a SIGTERM during set-up already means "stop after the first step".
        self.control = Control(cfg.run_dir / "control" if p.rank == 0 else None, rt.control_group)
        self.task = _load_task(cfg, rt)
        self.data_on_device = _place_data(self.task, rt.device)
        # On a GPU, step events wait for their loss to reach the host instead of syncing for it.
        self.deferring = rt.device.type == "cuda"
        # A GPU's forward pass is queued, not run, by the time the host's clock could time it.
        self.timing_compute = rt.device.type == "cpu"
        self.compute_s = 0.0
        """Seconds in the forward pass since the previous step event."""
        self.buffers = BufferPool()
        # Same initial weights on every rank, whatever the wrapper does.
        torch.manual_seed(cfg.seed)
        model = _build_model(cfg, self.task).to(rt.device)
        self.parameters = sum(t.numel() for t in model.parameters())
        if cfg.fsdp:
            model = _shard(model, cfg, rt)
        else:
            device_ids = [rt.device.index] if rt.device.type == "cuda" else None
            model = DistributedDataParallel(model, device_ids=device_ids)
            _settle_buckets(model, self.task, rt, self.data_on_device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.store = CheckpointStore(cfg.run_dir / "checkpoints", cfg.keep)
        # Dropout draws differ per rank, as they would with independent workers, and are
        # seeded anew at each step (by rank and step), so that no checkpoint needs every rank's
        # random state: a resume at any step draws what the uninterrupted run drew.
        self.reseeding = cfg.dropout > 0 and isinstance(self.task, CharText)
        # Read before the data and schedule are laid out: a checkpoint decides the global batch.
        checkpoint = None if cfg.resume is None else load(cfg.resume, self.store, cfg.fsdp, rt)
        self.shape = (
            Shape(p.world_size, cfg.batch_size, cfg.grad_accum)
            if checkpoint is None
            else resume_shape(checkpoint.shape, p.world_size, cfg.batch_size, cfg.grad_accum)
        )
        self.shards = Shards(
            self.task,
            rank=p.rank,
            world_size=p.world_size,
            batch_size=self.shape.batch_size,
            grad_accum=self.shape.grad_accum,
            seed=cfg.seed,
        )
        self.steps_per_epoch = self.shards.steps_per_epoch
        if self.steps_per_epoch == 0:
            raise TrainerError(
                f"{len(self.task)} samples do not fill one step of {self.shape.global_batch} "
                f"({p.world_size} ranks × --batch-size {self.shape.batch_size} × "
                f"--grad-accum {self.shape.grad_accum})"
            )
        self.total_steps = cfg.epochs * self.steps_per_epoch
        if cfg.max_steps is not None:
            self.total_steps = min(self.total_steps, cfg.max_steps)
        schedule = partial(
            lr_factor, warmup=cfg.warmup_steps, total=self.total_steps, floor=cfg.min_lr_ratio
        )
        self.parts = Parts(
            model,
            optimizer,
            torch.optim.lr_scheduler.LambdaLR(optimizer, schedule),
            torch.amp.GradScaler(rt.device.type, enabled=cfg.precision == "fp16"),
            cfg.fsdp,
        )
        self.autocast = _autocast(cfg, rt.device)
        self.resumed: Resumed | None = None
        if checkpoint is not None:
            self.resumed = restore(checkpoint, self.parts, self.shape)
        self.progress = self.resumed.progress if self.resumed else Progress()
        self.last_saved = self.progress.step if self.resumed else -1
        rescues = p.world_size > 1 and rt.device.type == "cpu" and not cfg.fsdp
        self.rescuer = (
            Rescuer(self.store, log, self._whole_state, cfg.run_dir / "control" / "rescue")
            if rescues
            else None
        )

    def start_event(self) -> dict[str, Any]:
        cfg, rt, resumed = self.cfg, self.rt, self.resumed
        versions = {"python": platform.python_version(), "torch": torch.__version__}
        if rt.device.type == "cuda":
            versions["cuda"] = str(torch.version.cuda)
            nccl = torch.cuda.nccl.version()
            versions["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        return {
            "config": cfg.to_json(),
            "versions": versions,
            "device": str(rt.device),
            "backend": rt.backend,
            "fsdp": cfg.fsdp,
            "task": "char_lm" if isinstance(self.task, CharText) else "synthetic",
            "parameters": self.parameters,
            "global_batch": self.shape.global_batch,
            "batch_size": self.shape.batch_size,
            "grad_accum": self.shape.grad_accum,
            "steps_per_epoch": self.steps_per_epoch,
            "total_steps": self.total_steps,
            "start_step": self.progress.step,
            "start_epoch": self.progress.epoch,
            "resumed_from": resumed.path if resumed else None,
            "exact_resume": resumed.exact if resumed else None,
            "skipped_checkpoints": [vars(s) for s in resumed.skipped] if resumed else [],
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
        }

    def _gradients(self, micro: list[torch.Tensor]) -> torch.Tensor:
        """Forward and backward over the step's micro-batches (the collectives); the loss."""
        model, scaler = self.parts.model, self.parts.scaler
        self.parts.optimizer.zero_grad(set_to_none=True)
        if self.reseeding:
            shape = self.shape
            torch.manual_seed(
                self.cfg.seed + 1 + self.rt.placement.rank + self.progress.step * shape.world_size
            )
        total: torch.Tensor | None = None
        # What a plain fp32 step on the CPU does not need is skipped rather than run as a no-op:
        # every call is a few microseconds, and a small model's step is a few milliseconds.
        to_device = self.rt.device.type != "cpu" and not self.data_on_device
        for i, indices in enumerate(micro):
            x, y = self.task.batch(indices)
            if to_device:
                x = x.to(self.rt.device, non_blocking=True)
                y = y.to(self.rt.device, non_blocking=True)
            with _grad_sync(model, i == len(micro) - 1):
                began = time.perf_counter()
                with self.autocast():
                    loss = self.task.loss(model(x), y)
                    if len(micro) > 1:
                        loss = loss / len(micro)
                if self.timing_compute:
                    # No collective runs in the forward pass: its time is this rank's own, where
                    # the step time is the slowest rank's for every rank (DDP waits for it).
                    self.compute_s += time.perf_counter() - began
                (scaler.scale(loss) if scaler.is_enabled() else loss).backward()
            total = loss.detach() if total is None else total + loss.detach()
        assert total is not None
        return total

    def _update(self) -> None:
        """The step's change to the state, with no collective under DDP (the gradients are
        all-reduced already): guarded, so that a rescue reads a whole step."""
        optimizer, scaler = self.parts.optimizer, self.parts.scaler
        if self.cfg.grad_clip > 0:
            scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(self.parts.model.parameters(), self.cfg.grad_clip)
        if scaler.is_enabled():
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        self.parts.scheduler.step()
        self.progress.step += 1
        self.progress.samples_in_epoch += self.shape.global_batch

    def _changing(self) -> contextlib.AbstractContextManager[None]:
        return self.rescuer.changing() if self.rescuer else _NO_CONTEXT

    def _whole_state(self) -> tuple[dict[str, Any], int, int, int]:
        progress = self.progress
        state = local_state(self.parts, progress, self.shape, self.cfg.to_json())
        return state, progress.step, progress.epoch, self.rt.placement.world_size

    def _groups(self) -> Iterator[list[torch.Tensor]]:
        """Micro-batch groups of the rest of the current epoch."""
        ga = self.shape.grad_accum
        batches = self.shards.epoch(self.progress.epoch, start=self.progress.samples_in_epoch)
        if self.data_on_device and batches:
            # One copy per epoch, from pinned memory and without waiting for it.
            order = torch.stack(batches).pin_memory()
            batches = list(order.to(self.rt.device, non_blocking=True).unbind())
        for i in range(0, len(batches) - ga + 1, ga):
            yield batches[i : i + ga]

    def _checkpoint(self) -> None:
        # Every rank: its peers wait on rank 0's save, and a long save is not a hang.
        self.log.emit("phase", phase="checkpoint")
        try:
            self._save()
        finally:
            self.log.emit("phase", phase="train")

    def _save(self) -> None:
        state = snapshot(self.parts, self.progress, self.shape, self.rt, self.cfg.to_json())
        self.last_saved = self.progress.step
        if state is None:
            return
        saved = self.store.save(
            state,
            step=self.progress.step,
            epoch=self.progress.epoch,
            world_size=self.rt.placement.world_size,
        )
        assert saved is not None, "only a rescue gives way to a newer checkpoint"
        self.log.emit(
            "checkpoint",
            path=str(saved.path),
            step=self.progress.step,
            epoch=self.progress.epoch,
            seconds=saved.seconds,
            bytes=saved.bytes,
        )

    def run(self) -> Outcome:
        cfg, progress, log, control = self.cfg, self.progress, self.log, self.control
        per_epoch = self.steps_per_epoch * self.shape.global_batch
        reason = "completed"
        window_start, window_steps = time.perf_counter(), 0
        while progress.step < self.total_steps and reason == "completed":
            for micro in self._groups():
                began = time.perf_counter()
                lr = self.parts.optimizer.param_groups[0]["lr"]
                loss = self._gradients(micro)
                with self._changing():
                    self._update()
                window_steps += 1
                finished = progress.step >= self.total_steps
                if progress.step % cfg.log_every == 0 or finished:
                    now = time.perf_counter()
                    self._log_step(micro, loss, lr, now - window_start, window_steps)
                    window_start, window_steps = now, 0
                elif self.deferring:
                    log.poll()
                epoch_done = progress.samples_in_epoch >= per_epoch
                if epoch_done:
                    self._end_epoch()
                if cfg.min_step_s and not finished:
                    # Before the control poll: a stop asked meanwhile is seen at once.
                    time.sleep(max(0.0, cfg.min_step_s - (time.perf_counter() - began)))
                requests = control.poll()
                if requests.stop and not finished:
                    reason = "stopped"
                    log.emit("stop_requested", step=progress.step, source=requests.source)
                periodic = cfg.checkpoint_every and progress.step % cfg.checkpoint_every == 0
                if finished or reason == "stopped" or requests.save or periodic:
                    self._checkpoint()
                if finished or reason == "stopped" or epoch_done:
                    break
            else:
                # No step left in the epoch: only after a resume on a smaller data set.
                self._end_epoch()
        control.settle()
        if self.last_saved != progress.step:
            self._checkpoint()
        dist.barrier(group=self.rt.control_group)
        return Outcome(progress.step, reason)

    def _log_step(
        self, micro: list[torch.Tensor], loss: torch.Tensor, lr: float, window_s: float, steps: int
    ) -> None:
        step_time = window_s / steps
        fields: dict[str, Any] = {
            "epoch": self.progress.epoch,
            "step": self.progress.step,
            "lr": lr,
            "samples_per_s": self.shape.batch_size * self.shape.grad_accum / step_time,
            "step_time_s": step_time,
            **memory_mib(self.rt.device),
        }
        if self.timing_compute:
            fields["compute_s"] = self.compute_s / steps
            self.compute_s = 0.0
        if self.cfg.log_samples:
            fields["samples"] = torch.cat(micro).tolist()
        if self.deferring:
            pending = DeviceScalars({"loss": loss}, self.buffers, convert=finite)
            self.log.defer(pending, "step", **fields)
        else:
            self.log.emit("step", loss=finite(loss.item()), **fields)

    def _end_epoch(self) -> None:
        self.log.emit("epoch_end", epoch=self.progress.epoch, step=self.progress.step)
        with self._changing():
            self.progress.epoch += 1
            self.progress.samples_in_epoch = 0
