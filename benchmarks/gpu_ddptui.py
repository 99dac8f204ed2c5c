"""ddptui itself on a GPU host, end to end, as a user would drive it: one loopback SSH host (the
demo's in-process server, so no sshd is needed), the bundled trainer on every GPU with nccl.

The commands run as subprocesses, exactly as typed: ``check`` (the probe reads the real driver
through NVML), ``launch --detach``, ``status --json`` until steps arrive, ``stop`` (checkpoint
first), ``resume --headless`` to the end, then ``status --json`` and ``logs --events``. Then,
where Textual is importable, the console on a fresh launch: the health screen and the run
screen's GPU pane, saved as SVG. It writes into OUT_DIR: check.json, status.json,
events-tail.txt and, with the console, health.svg and run-gpus.svg; the transcript goes to
stdout. ``--cpu`` runs the same path with gloo on two CPU processes (to try it without a GPU).

    python3 benchmarks/gpu_ddptui.py OUT_DIR [--cpu]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import tomli_w

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddptui.demo.cluster import demo_cluster  # noqa: E402

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

STEPS = 3000
CONSOLE_STEPS = 100000
"""Ample for the screenshots; the console's run is killed once they are taken."""
GPU_TRAINER = ["--precision", "bf16", "--width", "2048", "--depth", "4", "--batch-size", "1024",
               "--samples", "262144"]  # fmt: skip
CPU_TRAINER = ["--width", "64", "--depth", "2", "--samples", "4096", "--batch-size", "16",
               "--lr", "1e-2"]  # fmt: skip


def _configure(hosts_file: Path, on_gpu: bool, steps: int) -> None:
    """The demo's hosts file, turned from two CPU processes on gloo into every GPU on nccl."""
    document = tomllib.loads(hosts_file.read_text())
    document["cluster"]["backend"] = "auto"
    if on_gpu:
        document["hosts"][0]["gpus"] = "all"
    document["job"] = {
        "nproc_per_node": "gpus" if on_gpu else 2,
        "checkpoint_every": 500,
        "args": [
            *(GPU_TRAINER if on_gpu else CPU_TRAINER),
            *("--epochs", "1000", "--max-steps", str(steps)),
        ],
    }
    hosts_file.write_text(tomli_w.dumps(document))


def _ddptui(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    print(f"\n$ ddptui {' '.join(args)}", flush=True)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "ddptui", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    shown = done.stdout if len(done.stdout) < 4000 else f"…{done.stdout[-4000:]}"
    print(shown + done.stderr[-4000:], end="")
    print(f"(exit {done.returncode}, {time.monotonic() - started:.1f} s)", flush=True)
    return done


def _status() -> dict[str, Any]:
    done = _ddptui("status", "--json", timeout=60)
    status: dict[str, Any] = json.loads(done.stdout)
    return status


def _wait_for_steps(least: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status = _status()
        steps = [rank["step"] or 0 for rank in status["ranks"]]
        if steps and min(steps) >= least:
            return status
        live = ("staging", "starting", "running", "hung")
        if status["state"] not in live or time.monotonic() > deadline:
            raise SystemExit(f"no step {least} on every rank: {status['state']}, steps {steps}")
        time.sleep(2)


def _command_line(hosts_file: Path, out: Path) -> None:
    check = _ddptui("check", str(hosts_file), "--json", timeout=180)
    (out / "check.json").write_text(check.stdout)
    _ddptui("check", str(hosts_file), timeout=180)
    if check.returncode != 0:
        raise SystemExit("the check is not healthy: launching would be refused")
    if _ddptui("launch", str(hosts_file), "--detach").returncode != 0:
        raise SystemExit("launch failed")
    _wait_for_steps(200, timeout=180)
    if _ddptui("stop").returncode != 0:
        raise SystemExit("stop failed")
    stopped = _status()
    print(f"state after stop: {stopped['state']}")
    resumed = _ddptui("resume", "--headless", timeout=600)
    final = _status()
    (out / "status.json").write_text(json.dumps(final, indent=2))
    logs = _ddptui("logs", "--events", "--rank", "0", timeout=120)
    (out / "events-tail.txt").write_text("\n".join(logs.stdout.splitlines()[-40:]) + "\n")
    print(f"\nstop → {stopped['state']}; resume exit {resumed.returncode}; final {final['state']}")
    for rank in final["ranks"]:
        print(
            f"rank {rank['rank']}: step {rank['step']}, loss {rank['loss']}, "
            f"{rank['samples_per_s']} samples/s, cuda peak {rank['cuda_peak_mib']} MiB"
        )


async def _console(hosts_file: Path, out: Path) -> None:
    """The health screen on the real probe, then a launch from the keyboard and its GPU pane."""
    from ddptui.run.store import RunStore
    from ddptui.ui.app import DdptuiApp
    from ddptui.ui.screens.health import HealthScreen
    from tests.ui.pilot import kill_live_runs, launch_from_health, until

    store = RunStore()
    app = DdptuiApp(hosts_file, store=store)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            health = app.screen
            assert isinstance(health, HealthScreen)
            await until(pilot, "the check", lambda: health.report is not None, 180)
            await pilot.pause(0.5)
            app.save_screenshot("health.svg", path=str(out))
            await launch_from_health(pilot, 500, 180)
            await pilot.press("g")
            # Two GPU samples, so that the sparklines have a line.
            await pilot.pause(6)
            app.save_screenshot("run-gpus.svg", path=str(out))
            print("console: health.svg and run-gpus.svg saved", flush=True)
    finally:
        await kill_live_runs(store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--cpu", action="store_true", help="gloo on two CPU processes")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as state:
        # Runs go to a store of their own, which the subprocesses share.
        os.environ["XDG_STATE_HOME"] = state
        with demo_cluster(nodes=1, procs=1) as cluster:
            _configure(cluster.hosts_file, on_gpu=not args.cpu, steps=STEPS)
            print(cluster.hosts_file.read_text())
            try:
                _command_line(cluster.hosts_file, args.out)
            finally:
                # Whatever failed, nothing of a run may outlive the demo host's directory.
                _ddptui("stop", "--kill", timeout=120)
            try:
                import textual  # noqa: F401
            except ImportError:
                print("console: Textual is not importable here; no screenshots")
                return
            _configure(cluster.hosts_file, on_gpu=not args.cpu, steps=CONSOLE_STEPS)
            asyncio.run(_console(cluster.hosts_file, args.out))


if __name__ == "__main__":
    main()
