"""Stragglers on the test bed: none named on an unthrottled run, a throttled host named and
un-named, each measured as a user would see it (``status --json`` polled every second).

Three hosts, one rank each, training a model whose forward pass takes a few milliseconds; the
run is followed by its supervisor alone. First ``--quiet-minutes`` (default 10) unthrottled:
every rank ever named a straggler is printed (target: none). Then ``--rounds`` (default 3)
times, another host's rank is held to ``--cores`` of CPU (a cgroup's CFS quota) until it is
named, and let go until it is not: the seconds each took (targets: 60 s each), and whether the
rank and host named were the throttled ones.

Run as root from the repository root: ``.venv/bin/python benchmarks/stragglers.py`` (about 15
minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.run.bed import run_pid
from tests.testbed import TestBed, cpu_throttled

PREFIX = "ddbs"
HOSTS = 3
ARGS = [
    *("--width", "256", "--depth", "4", "--batch-size", "64", "--samples", "8192"),
    *("--epochs", "100000", "--max-steps", "10000000"),
]
POLL_S = 1.0
LIMIT_S = 180.0


class Bench:
    def __init__(self, bed: TestBed, work: Path) -> None:
        self.bed = bed
        self.env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
        self.hosts_file = bed.write_hosts_file(
            work / "hosts.toml", bed.hosts[:HOSTS], job={"nproc_per_node": 1, "args": ARGS}
        )

    def ddptui(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ddptui", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=300,
            check=False,
        )

    def status(self, run_id: str) -> dict[str, Any]:
        done = self.ddptui("status", run_id, "--json")
        document: dict[str, Any] = json.loads(done.stdout)
        return document

    def stragglers(self, run_id: str) -> list[tuple[int, str]]:
        ranks = self.status(run_id)["ranks"]
        return [(rank["rank"], rank["host"]) for rank in ranks if rank["straggler"]]


def until(what: str, ready: Any) -> tuple[float, Any]:
    began = time.monotonic()
    while time.monotonic() - began < LIMIT_S:
        found = ready()
        if found:
            return time.monotonic() - began, found
        time.sleep(POLL_S)
    raise SystemExit(f"no {what} within {LIMIT_S:.0f} s")


def quiet(bench: Bench, run_id: str, minutes: float) -> None:
    print(f"\n== {minutes:g} minutes unthrottled: any rank named a straggler", flush=True)
    named: dict[tuple[int, str], float] = {}
    began = time.monotonic()
    while time.monotonic() - began < minutes * 60:
        for found in bench.stragglers(run_id):
            named.setdefault(found, time.monotonic() - began)
        time.sleep(POLL_S)
    said = ", ".join(f"rank {rank} on {host} at {at:.0f} s" for (rank, host), at in named.items())
    print(f"named: {said or 'none'} (target: none)", flush=True)


def throttled(bench: Bench, run_id: str, rounds: int, cores: float) -> None:
    print(f"\n== a host held to {cores:g} core, {rounds} rounds", flush=True)
    named_s: list[float] = []
    cleared_s: list[float] = []
    for round_ in range(rounds):
        host = bench.bed.hosts[(round_ + 1) % HOSTS]
        pid = run_pid(host, run_id, b"LOCAL_RANK=0")
        with cpu_throttled([pid], cores, f"ddptui-bench-{os.getpid()}"):
            took, named = until("straggler", lambda: bench.stragglers(run_id))
        named_s.append(took)
        right = named == [(bench.bed.hosts.index(host), host.name)]
        took_back, _ = until("recovery", lambda: not bench.stragglers(run_id))
        cleared_s.append(took_back)
        print(
            f"round {round_ + 1}: {host.name} named in {took:.0f} s ({'right' if right else named})"
            f", un-named {took_back:.0f} s after the throttle was lifted",
            flush=True,
        )
    print(f"named: {_figures(named_s)} (target <= 60 s)")
    print(f"un-named: {_figures(cleared_s)} (target <= 60 s)")


def _figures(values: Sequence[float]) -> str:
    return f"median {statistics.median(values):.0f} s, range {min(values):.0f}-{max(values):.0f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quiet-minutes", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=float, default=0.2)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="ddptui-stragglers-") as tmp:
        bed = TestBed.start(HOSTS, Path(tmp) / "bed", prefix=PREFIX)
        try:
            bench = Bench(bed, Path(tmp))
            started = bench.ddptui("launch", str(bench.hosts_file), "--detach")
            if started.returncode != 0:
                raise SystemExit(started.stderr)
            run_id = started.stdout.strip()
            until("steps", lambda: (bench.status(run_id)["ranks"][0]["step"] or 0) > 50)
            quiet(bench, run_id, args.quiet_minutes)
            throttled(bench, run_id, args.rounds, args.cores)
            bench.ddptui("stop", run_id, "--kill")
        finally:
            bed.stop()


if __name__ == "__main__":
    main()
