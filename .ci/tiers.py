"""Fails a CI run whose suite reached fewer real parts than it holds.

Reads the suite's ``ddptui tiers run:`` line (tests/conftest.py): how many tests of each tier
ran rather than skipped. A machine that lost a bed's piece fails those tests under CI already;
this catches the rest: a tier deselected by the command, or tests skipped some other way.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

EXPECTED = {"cluster": 124, "slow": 62, "slurm": 7}
"""Each tier's tests in the suite, less those that need a GPU (3 slow ones). Raise a number
when you add a test of that tier; lower it only when you remove one."""


def main(summary: str) -> int:
    with Path(summary).open(encoding="utf-8", errors="replace") as lines:
        line = next((line for line in lines if line.startswith("ddptui tiers run:")), "")
    ran = {tier: int(count) for tier, count in re.findall(r"(\w+) (\d+)", line)}
    short = [
        f"{tier}: {ran.get(tier, 0)} ran, {expected} expected"
        for tier, expected in EXPECTED.items()
        if ran.get(tier, 0) < expected
    ]
    if short:
        print("the suite reached fewer real parts than it holds: " + "; ".join(short))
        return 1
    print("every tier ran:", ", ".join(f"{tier} {ran[tier]}" for tier in EXPECTED))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
