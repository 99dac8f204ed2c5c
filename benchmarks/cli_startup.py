"""Start-up time of ``ddptui --help`` beside ``torchrun --help``, measured side by side.

Run: ``.venv/bin/python benchmarks/cli_startup.py [--runs N]``. Runs alternate between the
two commands so that machine noise hits both alike; medians and their ratio are printed.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def _seconds(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    commands = {
        "ddptui --help": [str(BIN / "ddptui"), "--help"],
        "torchrun --help": [str(BIN / "torchrun"), "--help"],
    }
    for argv in commands.values():
        _seconds(argv)  # warm the page cache so the first measured run is not an outlier
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            samples[name].append(_seconds(argv))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    for name, value in medians.items():
        print(f"{name:<18} median {value * 1000:7.1f} ms over {runs} runs")
    ratio = medians["ddptui --help"] / medians["torchrun --help"]
    print(f"ratio ddptui/torchrun: {ratio:.3f}")


if __name__ == "__main__":
    main()
