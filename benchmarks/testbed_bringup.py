"""Bring-up and tear-down time of the multi-host test bed (target: 4 hosts, both, under 10 s).

Run as root from the repository root: ``.venv/bin/python benchmarks/testbed_bringup.py``.
Each size is measured ``--repeat`` times; the median and the worst are printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# The test bed lives in the tests package, importable only from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.testbed import TestBed

PREFIX = "ddptbnch"


def measure(n_hosts: int, root: Path) -> tuple[float, float]:
    began = time.monotonic()
    bed = TestBed.start(n_hosts, root, prefix=PREFIX)
    up = time.monotonic() - began
    began = time.monotonic()
    bed.stop()
    down = time.monotonic() - began
    residue = bed.residue()
    if residue:
        raise SystemExit(f"left behind after {n_hosts} hosts: {residue}")
    return up, down


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'hosts':>5} {'up s (median/max)':>18} {'down s (median/max)':>20} {'total s':>8}")
    with tempfile.TemporaryDirectory(prefix="ddptui-bench-") as tmp:
        for n_hosts in args.sizes:
            ups, downs = zip(
                *(measure(n_hosts, Path(tmp) / f"run{i}") for i in range(args.repeat)),
                strict=True,
            )
            print(
                f"{n_hosts:>5} {statistics.median(ups):>9.2f}/{max(ups):<8.2f}"
                f" {statistics.median(downs):>10.2f}/{max(downs):<9.2f}"
                f" {statistics.median(ups) + statistics.median(downs):>8.2f}"
            )


if __name__ == "__main__":
    main()
