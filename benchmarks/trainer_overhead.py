"""Steps/s of the bundled trainer against a bare DDP loop, alternating inside one torchrun job.

The bare loop is the one of PyTorch's DDP tutorial (zero_grad, forward, loss, backward, step) on
the same model, data, batch, process count and learning-rate schedule. The trainer side is the
trainer's own loop (``Trainer.run``, with its step event every step and its control polling)
with its defaults, but without gradient clipping, which the tutorial loop does not do either.
Each process gets one intra-op thread.

Both sides run in the same worker processes, in alternating rounds of ``--steps`` steps, each
round from a freshly built model and optimizer. On a small shared machine, two launches of the
very same loop, run in turns second by second, differed by up to 20% (where a process's memory
lands, how its threads share the cores), and a launch keeps that luck for its whole life: a
comparison across launches measures the luck more than the trainer. In one process, both sides
share it.

A round's rate is 1 / the median time between consecutive step ends on global rank 0, after a
warm-up; the ratio is the median over rounds of the trainer's rate / the bare loop's, with a
bootstrap interval over the rounds. Every round's losses are compared bit for bit: equal losses
show that both sides did the same arithmetic, so the difference in speed is the trainer's
machinery alone. ``--control`` runs the bare loop against itself: the noise floor of the ratio.

``--device cuda`` runs one process per GPU with nccl; both sides keep the data set on the GPU and
never wait for the device inside a step (the bare loop reads its losses after the round), so the
host runs ahead until CUDA's launch queue is full and then keeps the device's pace: with enough
steps per round (200 by default there) the median interval is the device's step time. GPU kernels
may pick other algorithms from run to run, so there equal losses are reported, not required.

    .venv/bin/python benchmarks/trainer_overhead.py [--rounds 60] [--steps 60] [--control]
    .venv/bin/python benchmarks/trainer_overhead.py --device cuda --precision bf16 \
        --width 8192 --depth 4 --batch-size 4096 [--rounds 20]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WARMUP = 10
PROFILE_ROWS = 30
BOOTSTRAP = 2000


def _model_args(args: argparse.Namespace) -> list[str]:
    """The same model, batch and precision for both sides: the trainer's flags."""
    return [
        "--width",
        str(args.width),
        "--depth",
        str(args.depth),
        "--batch-size",
        str(args.batch_size),
        "--precision",
        args.precision,
    ]


class Sides:
    """Both loops, built afresh for each round inside a torchrun worker."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        sys.path.insert(0, str(ROOT))
        from trainer import dist as trainer_dist

        self.args, self.work = args, work
        self.rt = trainer_dist.start("nccl" if args.device == "cuda" else "gloo", timeout_s=300)

    def _config(self, run_dir: Path) -> Any:
        from trainer.cli import parse_args

        flags = ["--run-dir", str(run_dir), "--max-steps", str(self.args.steps),
                 "--checkpoint-every", "0", "--log-every", "1",
                 # The tutorial loop does not clip; clipping is arithmetic of the recipe, not
                 # overhead of the trainer's machinery (it costs ~4% of this model's step).
                 "--grad-clip", "0", *_model_args(self.args)]  # fmt: skip
        return parse_args(flags)

    def trainer(self, round_: int) -> tuple[list[float], list[float]]:
        """Step-end times and losses of rank 0, from the trainer's own events."""
        import torch.distributed as dist

        from trainer.events import EventLog
        from trainer.loop import Trainer

        cfg = self._config(self.work / f"trainer-{round_}")
        log = EventLog(cfg.run_dir, self.rt.placement)
        try:
            Trainer(cfg, self.rt, log).run()
        finally:
            log.close()
        lines = log.path.read_text().splitlines()
        steps = [e for e in map(json.loads, lines) if e["type"] == "step"]
        # Every rank has read its own file before the run directory goes.
        dist.barrier()
        if self.rt.placement.rank == 0:
            shutil.rmtree(cfg.run_dir, ignore_errors=True)
        return [e["time"] for e in steps], [e["loss"] for e in steps]

    def bare(self, round_: int) -> tuple[list[float], list[float]]:
        import torch
        from torch.nn.parallel import DistributedDataParallel

        from trainer.data import Shards, SyntheticRegression
        from trainer.loop import lr_factor
        from trainer.models import MLP

        cfg = self._config(self.work / f"bare-{round_}")
        p, device = self.rt.placement, self.rt.device
        task = SyntheticRegression(cfg.samples, cfg.seed)
        torch.manual_seed(cfg.seed)
        model = MLP(task.in_dim, cfg.width, cfg.depth, task.out_dim).to(device)
        on_gpu = device.type == "cuda"
        if on_gpu:
            task.to(device)
            model = DistributedDataParallel(model, device_ids=[device.index])
        else:
            model = DistributedDataParallel(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        # The trainer's learning-rate schedule too: the values it produces change how fast a
        # CPU computes (denormals), so without it the two would not do the same arithmetic.
        schedule = partial(
            lr_factor, warmup=cfg.warmup_steps, total=cfg.max_steps, floor=cfg.min_lr_ratio
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        shards = Shards(
            task, rank=p.rank, world_size=p.world_size, batch_size=cfg.batch_size, seed=cfg.seed
        )
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.precision)
        autocast = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
        ends: list[float] = []
        losses: list[torch.Tensor] = []
        step, epoch = 0, 0
        while step < cfg.max_steps:
            batches = shards.epoch(epoch)
            if on_gpu:
                batches = list(torch.stack(batches).to(device).unbind())
            for indices in batches:
                x, y = task.batch(indices)
                optimizer.zero_grad()
                with autocast:
                    loss = task.loss(model(x), y)
                loss.backward()
                optimizer.step()
                scheduler.step()
                # What the trainer's events hold, kept in memory: no I/O on this side.
                ends.append(time.time())
                losses.append(loss.detach())
                step += 1
                if step == cfg.max_steps:
                    break
            epoch += 1
        return ends, [t.item() for t in losses]


def _rate(ends: list[float]) -> float:
    return 1 / statistics.median(b - a for a, b in itertools.pairwise(ends[WARMUP:]))


def _profiled(
    side: Any, round_: int, steps: int, on_gpu: bool
) -> dict[str, tuple[float, float, float]]:
    """Op → (calls, self CPU µs, self device µs) per step of one round of ``side``."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if on_gpu else [])]
    with profile(activities=activities) as measured:
        side(round_)
    return {
        row.key: (
            row.count / steps,
            row.self_cpu_time_total / steps,
            row.self_device_time_total / steps,
        )
        for row in measured.key_averages()
    }


def _profile_table(
    a: dict[str, tuple[float, float, float]], b: dict[str, tuple[float, float, float]]
) -> str:
    """The ops whose calls or times per step differ most between the two sides."""
    none = (0.0, 0.0, 0.0)
    names = sorted(
        set(a) | set(b),
        key=lambda name: (
            -sum(abs(x - y) for x, y in zip(a.get(name, none), b.get(name, none), strict=True))
        ),
    )
    lines = [f"{'op':<44} {'calls/step':>17} {'self CPU µs/step':>19} {'device µs/step':>17}"]
    for name in names[:PROFILE_ROWS]:
        (ca, ta, da), (cb, tb, db) = a.get(name, none), b.get(name, none)
        lines.append(
            f"{name[:44]:<44} {ca:>8.2f} {cb:>8.2f} {ta:>9.1f} {tb:>9.1f} {da:>8.1f} {db:>8.1f}"
        )
    (_, cpu_a, device_a), (_, cpu_b, device_b) = (
        tuple(map(sum, zip(*side.values(), strict=True))) for side in (a, b)
    )
    lines.append(f"{'(all ops: self CPU, device)':<44} {'':>17} {cpu_a:>9.1f} {cpu_b:>9.1f} "
                 f"{device_a:>8.1f} {device_b:>8.1f}")  # fmt: skip
    return "\n".join(lines)


def worker(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    work = Path(args.worker)
    sides = Sides(args, work)
    first, second = (sides.bare, sides.bare) if args.control else (sides.trainer, sides.bare)
    if args.profile:
        for side in (first, second):
            side(0)
        on_gpu = args.device == "cuda"
        a, b = (_profiled(side, 1, args.steps, on_gpu) for side in (first, second))
        if sides.rt.placement.rank == 0:
            (work / "profile.txt").write_text(_profile_table(a, b))
        dist.destroy_process_group()
        return
    rounds = []
    for round_ in range(args.rounds):
        # Alternate which side goes first, so that neither always runs on a warmer machine.
        a_first = round_ % 2 == 0
        order = (first, second) if a_first else (second, first)
        results = [side(round_) for side in order]
        (a_ends, a_losses), (b_ends, b_losses) = results if a_first else results[::-1]
        rounds.append({"a": _rate(a_ends), "b": _rate(b_ends), "same_losses": a_losses == b_losses})
    if sides.rt.placement.rank == 0:
        (work / "rounds.json").write_text(json.dumps(rounds))
    dist.destroy_process_group()


def _torchrun(args: argparse.Namespace, work: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--node_rank", "0",
            "--nproc-per-node", str(args.nproc), "--master_addr", "127.0.0.1",
            "--master_port", str(port), str(Path(__file__).resolve()), "--worker", str(work),
            "--rounds", str(args.rounds), "--steps", str(args.steps), *_model_args(args),
            "--device", args.device, *(["--control"] if args.control else []),
            *(["--profile"] if args.profile else [])]  # fmt: skip
    # One intra-op thread per process: by default each of the processes starts a pool as wide
    # as the machine, and their oversubscription swamps the difference being measured.
    env = {"OMP_NUM_THREADS": "1", **os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(
            f"the benchmark's torchrun job failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
        )


def _interval(ratios: list[float], level: float = 0.90) -> tuple[float, float]:
    """A bootstrap interval of the median ratio: how far the figure moves with other rounds."""
    rng = random.Random(0)
    medians = sorted(
        statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(BOOTSTRAP)
    )
    tail = int(BOOTSTRAP * (1 - level) / 2)
    return medians[tail], medians[-tail - 1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=60, help="rounds per side")
    p.add_argument(
        "--steps", type=int, help="steps per round, with the warm-up (default 60; 200 on cuda)"
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--nproc", type=int, help="processes (default 2; on cuda one per GPU)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--control", action="store_true", help="the bare loop against itself")
    p.add_argument(
        "--profile",
        action="store_true",
        help="instead of rounds, one profiled round per side on rank 0 (after a warm-up round): "
        "the ops whose calls and times per step differ most",
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    on_gpu = args.device == "cuda"
    if args.steps is None:
        args.steps = 200 if on_gpu else 60
    if args.nproc is None:
        args.nproc = _gpu_count() if on_gpu and not args.worker else 2
    if args.steps <= WARMUP + 1:
        p.error(f"--steps must exceed the {WARMUP}-step warm-up")
    if args.worker:
        worker(args)
        return
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        _torchrun(args, Path(tmp))
        if args.profile:
            print(f"per step, trainer | bare DDP, {args.steps} steps, {args.device}:")
            print((Path(tmp) / "profile.txt").read_text())
            return
        rounds = json.loads((Path(tmp) / "rounds.json").read_text())
    a_name = "bare (control)" if args.control else "trainer"
    ratios = [r["a"] / r["b"] for r in rounds]
    low, high = _interval(ratios)
    print(
        f"{args.nproc} processes on {args.device}, MLP width {args.width} depth {args.depth}, "
        f"batch {args.batch_size}/process, {args.precision}; {args.rounds} rounds of "
        f"{args.steps} steps per side, {time.monotonic() - started:.0f} s"
    )
    print(f"{a_name}: {statistics.median(r['a'] for r in rounds):.1f} steps/s (median round)")
    print(f"bare DDP: {statistics.median(r['b'] for r in rounds):.1f} steps/s (median round)")
    print(
        f"ratio {a_name} / bare: {statistics.median(ratios):.3f} (median of the rounds' ratios; "
        f"90% interval {low:.3f}–{high:.3f}){'' if args.control else '; target ≥ 0.97'}"
    )
    same = sum(r["same_losses"] for r in rounds)
    print(f"rounds with bit-identical losses on both sides: {same} of {len(rounds)}")
    if same != len(rounds) and not on_gpu:
        sys.exit("the two sides computed different losses: the comparison is not like for like")


def _gpu_count() -> int:
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        sys.exit("--device cuda: no CUDA device is visible")
    return count


if __name__ == "__main__":
    main()
