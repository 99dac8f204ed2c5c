"""Steps/s of the bundled trainer against a bare DDP loop, side by side in one run.

The bare loop is the one of PyTorch's DDP tutorial (zero_grad, forward, loss, backward, step) on
the same model, data, batch, process count and learning-rate schedule. The trainer runs with its
defaults, a step event every step and the control poll every step, but without gradient
clipping, which the tutorial loop does not do either. Rounds alternate which goes first so that
drifting machine load hits both alike, and each process gets one intra-op thread. A run's rate
is 1 / the median time between consecutive step ends (after a warm-up), measured inside rank 0:
start-up and shutdown are excluded, and the median shrugs off the bursts of a shared machine.

    .venv/bin/python benchmarks/trainer_overhead.py [--rounds 3] [--steps 300] [--nproc 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARMUP = 20


def _torchrun(nproc: int, target: list[str], cwd: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--node_rank", "0",
            "--nproc-per-node", str(nproc), "--master_addr", "127.0.0.1",
            "--master_port", str(port), *target]  # fmt: skip
    # One intra-op thread per process: by default each of the processes starts a pool as wide
    # as the machine, and their oversubscription swamps the difference being measured.
    env = {"OMP_NUM_THREADS": "1", **os.environ, "PYTHONWARNINGS": "ignore"}
    subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True)


def _model_args(args: argparse.Namespace) -> list[str]:
    """The same model and batch for both loops: the flags are spelled alike on both CLIs."""
    return [
        "--width",
        str(args.width),
        "--depth",
        str(args.depth),
        "--batch-size",
        str(args.batch_size),
    ]


def trainer_rate(args: argparse.Namespace, work: Path) -> float:
    run_dir = work / f"run-{time.monotonic_ns()}"
    _torchrun(
        args.nproc,
        [
            "-m",
            "trainer",
            "--run-dir",
            str(run_dir),
            "--max-steps",
            str(args.steps),
            "--checkpoint-every",
            "0",
            "--log-every",
            "1",
            # The tutorial loop does not clip; clipping is arithmetic of the recipe, not
            # overhead of the trainer's machinery (it costs ~4% of this model's step).
            "--grad-clip",
            "0",
            *_model_args(args),
        ],
        cwd=ROOT,
    )
    lines = (run_dir / "events" / "rank0.jsonl").read_text().splitlines()
    steps = [e for e in map(json.loads, lines) if e["type"] == "step" and e["step"] > WARMUP]
    shutil.rmtree(run_dir)
    return 1 / statistics.median(e["step_time_s"] for e in steps)


def bare_rate(args: argparse.Namespace, work: Path) -> float:
    out = work / f"bare-{time.monotonic_ns()}.json"
    _torchrun(
        args.nproc,
        [
            str(Path(__file__).resolve()),
            "--worker",
            str(out),
            "--steps",
            str(args.steps),
            *_model_args(args),
        ],
        cwd=ROOT,
    )
    rate: float = json.loads(out.read_text())["steps_per_s"]
    return rate


def bare_worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    sys.path.insert(0, str(ROOT))
    from trainer.cli import parse_args
    from trainer.data import Shards, SyntheticRegression
    from trainer.loop import lr_factor
    from trainer.models import MLP

    defaults = parse_args([])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    task = SyntheticRegression(defaults.samples, defaults.seed)
    torch.manual_seed(defaults.seed)
    model = DistributedDataParallel(MLP(task.in_dim, args.width, args.depth, task.out_dim))
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=defaults.lr, weight_decay=defaults.weight_decay
    )
    # The trainer's learning-rate schedule too: the values it produces change how fast a CPU
    # computes (denormals), so without it the two loops would not do the same arithmetic.
    schedule = partial(
        lr_factor, warmup=defaults.warmup_steps, total=args.steps, floor=defaults.min_lr_ratio
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    shards = Shards(task, rank=rank, world_size=world, batch_size=args.batch_size, seed=0)
    step, epoch, durations = 0, 0, []
    last = time.perf_counter()
    while step < args.steps:
        for indices in shards.epoch(epoch):
            x, y = task.batch(indices)
            optimizer.zero_grad()
            task.loss(model(x), y).backward()
            optimizer.step()
            scheduler.step()
            step += 1
            now = time.perf_counter()
            durations.append(now - last)
            last = now
            if step == args.steps:
                break
        epoch += 1
    rate = 1 / statistics.median(durations[WARMUP:])
    if rank == 0:
        Path(args.worker).write_text(json.dumps({"steps_per_s": rate}))
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        bare_worker(args)
        return
    trainer, bare = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            # Alternate which goes first, so a load that drifts within a round favours neither.
            if round_ % 2:
                bare.append(bare_rate(args, Path(tmp)))
                trainer.append(trainer_rate(args, Path(tmp)))
            else:
                trainer.append(trainer_rate(args, Path(tmp)))
                bare.append(bare_rate(args, Path(tmp)))
            print(f"round {round_ + 1}: trainer {trainer[-1]:7.1f} steps/s   bare DDP "
                  f"{bare[-1]:7.1f} steps/s   ratio {trainer[-1] / bare[-1]:.3f}")  # fmt: skip
    t, b = statistics.median(trainer), statistics.median(bare)
    print(
        f"median of {args.rounds} rounds ({args.nproc} processes, {args.steps} steps, "
        f"MLP width {args.width} depth {args.depth}, batch {args.batch_size}/process): "
        f"trainer {t:.1f} steps/s, bare {b:.1f} steps/s, ratio {t / b:.3f} (target ≥ 0.97)"
    )


if __name__ == "__main__":
    main()
