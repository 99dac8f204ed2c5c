"""The run screen under load: 64 ranks × 50 step events/s, plus bursts of 10,000 error lines;
or a large cluster's size (issue 33: ``--nodes 128 --per-node 8 --rate 5 --seconds 300``, 1,024
ranks, a row per node and the loss drawn as bands).

Run: ``.venv/bin/python benchmarks/console_load.py [--seconds 60]``. The console runs headless
(Textual's test driver: layout, rendering and compositing happen, the terminal write does not);
a task in its event loop feeds the run's model as the supervisor would and posts the same
``RunChanged`` messages. Printed: the CPU share of the whole process and of the console alone
(the feeding's own time, which the runs layer pays in any front end, taken out), the worst gap
between ticks of a 10 ms timer (no frame can come sooner than the loop is free), redraws done,
and memory (RSS) after warm-up (when every rank's loss history is full: 20 s at the default
size, 56 s at 1,024 ranks × 5 steps/s), at the end and every 10 s. Targets (issue 10): under
25% of one core, no gap over 250 ms, memory flat after warm-up; at 1,024 ranks (issue 33) the
console alone under 10%.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.sim_backend import sim_run
from ddptui.run.following.model import RunModel
from ddptui.run.following.progress import loss_points
from ddptui.run.following.updates import FileLine
from ddptui.ui.app import DdptuiApp
from ddptui.ui.messages import RunChanged
from ddptui.ui.screens.run import RunScreen

NODES, PER_NODE = 8, 8
RATE_HZ = 50.0
FEED_CHUNK = 256
"""Step events applied between turns of the event loop, as a follower hands them over."""
BURST_LINES = 10_000
BURST_EVERY_S = 10.0
BURST_CHUNK = 500
"""Lines per feeding round (every 20 ms): about what one read of a follower brings."""
TICK_S = 0.01
WARM_UP_S = 20.0
"""At least; longer until every rank's loss curve is full (1,024 points at 50 steps/s: 20 s)
and thinning begins."""
RSS_EVERY_S = 10.0
ERROR_LINES = (
    "[rank5]: Traceback (most recent call last):",
    '[rank5]:   File "/home/alice/ddptui/trainer/loop.py", line 212, in step',
    "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "node5:1170:1170 [5] bootstrap.cc:114 NCCL WARN Bootstrap : no socket interface found",
)


def _rss_mib() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _step(rank: int, step: int, per_node: int, world: int) -> str:
    return json.dumps(
        {
            "v": 1, "type": "step", "rank": rank, "local_rank": rank % per_node,
            "node_rank": rank // per_node, "world_size": world, "time": time.time(),
            "epoch": 0, "step": step, "loss": 4.0 / (1 + step * 0.01) + rank * 1e-3,
            "lr": 1e-3, "samples_per_s": 8000.0, "step_time_s": 0.02, "rss_mib": 2900.0,
        }
    )  # fmt: skip


async def _load(
    screen: RunScreen, seconds: float, per_node: int, rate: float, warm_up: float
) -> dict[str, Any]:
    model = screen.run_model
    world = model.record.world_size
    gaps = [0.0]
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(TICK_S)
            now = time.perf_counter()
            gaps.append(now - last - TICK_S)
            last = now

    ticking = asyncio.create_task(ticker())
    feed_cpu, step, next_burst, burst = 0.0, 0, BURST_EVERY_S, 0
    began = time.perf_counter()
    warm: dict[str, float] = {}
    rss_every: list[float] = []
    while (elapsed := time.perf_counter() - began) < seconds:
        if elapsed >= len(rss_every) * RSS_EVERY_S:
            rss_every.append(_rss_mib())
        if not warm and elapsed >= min(warm_up, seconds / 3):
            warm = {"rss": _rss_mib(), "cpu": time.process_time(), "wall": time.perf_counter()}
            warm["feed"], gaps[:] = feed_cpu, [0.0]
        cpu = time.process_time()
        step += 1
        for rank in range(world):
            host = f"sim{rank // per_node:04d}"
            model.apply(
                FileLine(host, f"events/rank{rank}.jsonl", 0, _step(rank, step, per_node, world))
            )
            if rank % FEED_CHUNK == FEED_CHUNK - 1:
                feed_cpu += time.process_time() - cpu
                await asyncio.sleep(0)
                cpu = time.process_time()
        if elapsed >= next_burst:
            next_burst += BURST_EVERY_S
            burst = BURST_LINES
        # A follower hands lines over as it reads them: a burst arrives in chunks.
        for index in range(min(burst, BURST_CHUNK)):
            text = ERROR_LINES[index % len(ERROR_LINES)]
            model.apply(FileLine("sim0000", "logs/attempt-1/x/5/stderr.log", 0, text))
        burst -= min(burst, BURST_CHUNK)
        feed_cpu += time.process_time() - cpu
        screen.post_message(RunChanged(model))
        await asyncio.sleep(max(0.0, began + step / rate - time.perf_counter()))
    stop.set()
    await ticking
    wall = time.perf_counter() - warm["wall"]
    cpu = time.process_time() - warm["cpu"]
    feed = feed_cpu - warm["feed"]
    result: dict[str, Any] = {
        "wall_s": wall,
        "cpu_share": cpu / wall,
        "console_cpu_share": (cpu - feed) / wall,
        "worst_gap_ms": max(gaps) * 1000,
        "rss_warm_mib": warm["rss"],
        "rss_end_mib": _rss_mib(),
        "steps": step,
        "rss_every": rss_every,
    }
    return result


async def main(seconds: float, pane: str, nodes: int, per_node: int, rate: float) -> None:
    record, _ = sim_run("20261201-000000-load", nodes, per_node, running=True)
    screen = RunScreen(record, model=RunModel(record))
    app = DdptuiApp(first_screen=screen)
    # Until every rank's loss curve is full and thinning begins.
    warm_up = max(WARM_UP_S, loss_points(record.world_size) / rate + 5)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press(pane)
        result = await _load(screen, seconds, per_node, rate, warm_up)
    print(
        f"pane {pane!r}, {seconds:.0f} s, {record.world_size} ranks × {rate:g} events/s, "
        f"{BURST_LINES} error lines every {BURST_EVERY_S:.0f} s (after warm-up):\n"
        f"  CPU {result['cpu_share'] * 100:.1f}% of one core "
        f"(console alone {result['console_cpu_share'] * 100:.1f}%)\n"
        f"  worst event-loop gap {result['worst_gap_ms']:.0f} ms\n"
        f"  RSS {result['rss_warm_mib']:.0f} MiB after warm-up, {result['rss_end_mib']:.0f} MiB "
        "at the end\n"
        f"  RSS every {RSS_EVERY_S:.0f} s: "
        + " ".join(f"{rss:.0f}" for rss in result["rss_every"])
        + " MiB"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--pane", choices=("e", "o", "g"), default="e", help="pane on show")
    parser.add_argument("--nodes", type=int, default=NODES)
    parser.add_argument("--per-node", type=int, default=PER_NODE)
    parser.add_argument("--rate", type=float, default=RATE_HZ, help="step events a rank a second")
    args = parser.parse_args()
    asyncio.run(main(args.seconds, args.pane, args.nodes, args.per_node, args.rate))
