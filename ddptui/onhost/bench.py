"""ddptui's interconnect benchmark: one process on every host, with a launch's backend,
interface and environment, meeting as torchrun's ranks do (``MASTER_ADDR``, ``MASTER_PORT``,
``RANK``, ``WORLD_SIZE``).

``python bench.py --sizes B1,B2,… --pair-bytes B --iters N --backend gloo|nccl``. It times an
all-reduce of each size across all hosts, then one of ``--pair-bytes`` between each host and
its ring neighbour, one pair at a time (those that seemed slow again, later), and rank 0 prints
one JSON document:
``{"backend", "world_size", "sweep": [[bytes, seconds], …], "pairs": [[a, b, seconds], …]}``.
Sent to the hosts as a file and run with their torch; it imports nothing of ddptui.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

SLOW_S = 0.5
"""An all-reduce that takes longer is measured once, and the sweep stops after its size: a slow
link must not make the benchmark take minutes."""


PAIR_PASSES = 3
SUSPECT_TIMES = 2.0
"""A pair slower than this many times the quickest is measured again, in a later pass over
the pairs (up to ``PAIR_PASSES`` in all), and keeps its best: a busy moment of a shared
machine is brief, a slow link stays slow."""


def once(tensor: torch.Tensor, group: object = None) -> float:
    began = time.perf_counter()
    dist.all_reduce(tensor, group=group)
    synchronize(tensor)
    return time.perf_counter() - began


def timed(tensor: torch.Tensor, iters: int, group: object = None) -> float:
    """Seconds per all-reduce of ``tensor``, after a warm-up one."""
    once(tensor, group)
    began = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor, group=group)
    synchronize(tensor)
    return (time.perf_counter() - began) / iters


def synchronize(tensor: torch.Tensor) -> None:
    if tensor.is_cuda:
        torch.cuda.synchronize(tensor.device)


def fastest(tensor: torch.Tensor, iters: int, group: object) -> float:
    """The quickest of ``iters`` all-reduces, after a warm-up one: what the link can do, not
    what the scheduler allowed once."""
    once(tensor, group)
    return min(once(tensor, group) for _ in range(iters))


def rounds(world: int) -> list[list[tuple[int, int]]]:
    """The ring's neighbour pairs, in rounds of pairs that share no host."""
    if world < 2:
        return []
    if world == 2:
        return [[(0, 1)]]
    pairs = [(rank, (rank + 1) % world) for rank in range(world)]
    if world % 2 == 0:
        return [pairs[0::2], pairs[1::2]]
    return [pairs[0 : world - 1 : 2], pairs[1 : world - 1 : 2], [pairs[-1]]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--pair-bytes", type=int, required=True)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    args = parser.parse_args()
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = None
    if args.backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    sweep = []
    for size in (int(part) for part in args.sizes.split(",")):
        tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
        first = once(tensor)
        # Rank 0's clock decides for every rank: they must run the same collectives.
        slow = torch.tensor([first > SLOW_S], dtype=torch.int32, device=device)
        dist.broadcast(slow, 0)
        if bool(slow.item()):
            sweep.append([size, first])
            break
        sweep.append([size, timed(tensor, args.iters)])
    schedule = rounds(world)
    groups = {pair: dist.new_group(list(pair)) for chunk in schedule for pair in chunk}
    slots = {pair: index for index, pair in enumerate(groups)}
    best = torch.full((len(groups),), float("inf"), dtype=torch.float64)
    tensor = torch.ones(args.pair_bytes // 4, dtype=torch.float32, device=device)
    suspects = list(groups)
    for _ in range(PAIR_PASSES):
        measured = torch.zeros(len(groups), dtype=torch.float64)
        # One pair at a time: pairs measured at once also share whatever else the hosts share
        # (their CPUs, a switch's uplink), and one kept waiting read as a slow link on a busy
        # machine.
        for pair in suspects:
            dist.barrier()
            if rank in pair:
                seconds = fastest(tensor, args.iters, groups[pair])
                if rank == pair[0]:
                    measured[slots[pair]] = seconds
        dist.barrier()
        dist.all_reduce(measured)
        for pair in suspects:
            best[slots[pair]] = min(float(best[slots[pair]]), float(measured[slots[pair]]))
        # Every rank holds the same sums, so every rank picks the same pairs to measure again.
        quickest = float(best.min())
        suspects = [pair for pair in suspects if best[slots[pair]] > SUSPECT_TIMES * quickest]
        if not suspects:
            break
    if rank == 0:
        pairs = [[a, b, float(best[slots[(a, b)]])] for (a, b) in groups]
        document = {"backend": args.backend, "world_size": world, "sweep": sweep, "pairs": pairs}
        print(json.dumps(document), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
