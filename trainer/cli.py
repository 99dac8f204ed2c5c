"""Command line of the bundled trainer."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Config:
    run_dir: Path
    data: Path | None
    samples: int
    seed: int
    epochs: int
    max_steps: int | None
    batch_size: int
    grad_accum: int
    lr: float
    weight_decay: float
    warmup_steps: int
    min_lr_ratio: float
    grad_clip: float
    precision: str
    backend: str
    dist_timeout: float
    fsdp: bool
    width: int
    depth: int
    heads: int
    block_size: int
    dropout: float
    log_every: int
    log_samples: bool
    min_step_s: float
    checkpoint_every: int
    keep: int
    resume: str | None

    def to_json(self) -> dict[str, Any]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0 and 3600 s, got {text}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {value}")
    return value


DEFAULT_EPOCHS = 10


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m trainer",
        description="Reference DDP trainer: run it under torchrun, or alone for debugging.",
    )
    p.add_argument(
        "--run-dir",
        type=Path,
        default=Path("trainer-run"),
        help="events/, checkpoints/ and control/ live here (default: %(default)s)",
    )
    data = p.add_argument_group("data")
    data.add_argument(
        "--data",
        type=Path,
        default=None,
        help="text file: train a character-level transformer LM on it "
        "(read on global rank 0 and broadcast); default: synthetic task",
    )
    data.add_argument(
        "--samples",
        type=_positive,
        default=8192,
        help="size of the synthetic data set (default: %(default)s)",
    )
    data.add_argument("--seed", type=int, default=0)
    opt = p.add_argument_group("optimisation")
    opt.add_argument(
        "--epochs",
        type=_positive,
        default=None,
        help=f"default {DEFAULT_EPOCHS}, or as many as --max-steps takes when it is given",
    )
    opt.add_argument(
        "--max-steps",
        type=_positive,
        default=None,
        help="total optimizer steps of the run, resumed steps included; "
        "training ends at whichever of --epochs and --max-steps comes first",
    )
    opt.add_argument("--batch-size", type=_positive, default=32, help="per process")
    opt.add_argument(
        "--grad-accum", type=_positive, default=1, help="micro-batches per optimizer step"
    )
    opt.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (AdamW)")
    opt.add_argument("--weight-decay", type=float, default=0.01)
    opt.add_argument("--warmup-steps", type=_non_negative, default=10)
    opt.add_argument(
        "--min-lr-ratio", type=float, default=0.1, help="the cosine schedule ends at lr × this"
    )
    opt.add_argument("--grad-clip", type=float, default=1.0, help="max grad norm; 0 disables")
    opt.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    dist = p.add_argument_group("distribution")
    dist.add_argument(
        "--backend",
        choices=("auto", "nccl", "gloo"),
        default="auto",
        help="auto: nccl when every local rank has its own GPU, else gloo",
    )
    dist.add_argument(
        "--dist-timeout",
        type=float,
        default=300.0,
        help="seconds before a collective or the process group start gives up",
    )
    dist.add_argument("--fsdp", action="store_true", help="shard with FSDP (fully_shard)")
    model = p.add_argument_group("model")
    model.add_argument("--width", type=_positive, default=512, help="hidden size")
    model.add_argument("--depth", type=_positive, default=3, help="hidden layers / blocks")
    model.add_argument("--heads", type=_positive, default=4, help="attention heads (LM)")
    model.add_argument("--block-size", type=_positive, default=64, help="context length (LM)")
    model.add_argument("--dropout", type=float, default=0.1, help="dropout (LM)")
    obs = p.add_argument_group("events and checkpoints")
    obs.add_argument("--log-every", type=_positive, default=1, help="step event every N steps")
    obs.add_argument(
        "--log-samples",
        action="store_true",
        help="add the data set indices of each step to its step event",
    )
    obs.add_argument(
        "--min-step-s",
        type=_seconds,
        default=0.0,
        metavar="S",
        help="each step takes at least S seconds, sleeping the rest: a tiny model on CPU "
        "otherwise takes every core it can (a test bed, a demo beside other work); default 0",
    )
    obs.add_argument(
        "--checkpoint-every",
        type=_non_negative,
        default=200,
        help="steps between checkpoints; 0: only at stop and at the end",
    )
    obs.add_argument("--keep", type=_positive, default=2, help="checkpoints to keep")
    obs.add_argument(
        "--resume",
        default=None,
        metavar="PATH|latest",
        help="a checkpoint file, or latest (newest valid one in the run directory)",
    )
    return p


def parse_args(argv: Sequence[str] | None = None) -> Config:
    ns = build_parser().parse_args(argv)
    if ns.epochs is None:
        # `-- --max-steps 200` means 200 steps: every epoch has at least one, so as many
        # epochs as steps never end the run first.
        ns.epochs = DEFAULT_EPOCHS if ns.max_steps is None else ns.max_steps
    return Config(**vars(ns))
