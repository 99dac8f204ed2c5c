"""How soon a frozen rank is named, and by every view alike: the bundled trainer on three bed
hosts (one rank each, its default model and steps, run until stopped), rank 1's process
SIGSTOPped, then ``ddptui status --json`` asked every half second until it says ``hung``.

Printed per run: seconds from the freeze to ``status`` saying hung (``--target`` 25 s), the
window the supervisor stated, how long after the last step event the hang was recorded
(``record`` − ``since``: the window plus judging's own delay), and each rank's mark in that one
``status`` (the frozen rank ``stuck``, the others ``waiting``: the rank table reads the same
judgement). Then the median and range over ``--runs`` runs.

Run as root from the repository root, on an otherwise idle machine:
``.venv/bin/python benchmarks/frozen_rank.py`` (about 2 minutes a run on 2 cores).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.run.bed import Cli, frozen, kill_run, run_pid, wait_for_step, wait_until
from tests.testbed import TestBed

PREFIX = "ddbf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--target", type=float, default=25.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddptui-bench-") as tmp:
        work = Path(tmp)
        bed = TestBed.start(3, work / "bed", prefix=PREFIX)
        try:
            named = [_one(bed, work / f"run{number}", number) for number in range(args.runs)]
        finally:
            bed.stop()
    middle = statistics.median(named)
    print(
        f"\nfrozen rank named hung in {middle:.1f} s median ({min(named):.1f}–{max(named):.1f} s) "
        f"over {args.runs} runs; target {args.target:g} s: "
        f"{'met' if max(named) <= args.target else 'MISSED'}"
    )


def _one(bed: TestBed, work: Path, number: int) -> float:
    work.mkdir(parents=True)
    cli = Cli(work / "state")
    hosts = bed.hosts[:3]
    hosts_file = bed.write_hosts_file(work / "hosts.toml", hosts, job={"nproc_per_node": 1})
    endless = ("--epochs", "100000", "--max-steps", "1000000")
    launched = cli.run("launch", str(hosts_file), "--detach", "--", *endless)
    assert launched.returncode == 0, launched.stderr
    run_id = launched.stdout.strip()
    try:
        wait_for_step(bed, hosts, run_id, 30, timeout=240)
        with frozen(run_pid(hosts[1], run_id, b"LOCAL_RANK=0")) as frozen_at:
            status = wait_until(
                "status to say hung",
                lambda: (found := cli.json("status", run_id))["state"] == "hung" and found,
                180,
                every=0.5,
            )
            said = time.time() - frozen_at
        recorded = next(c["time"] for c in status["states"] if c["state"] == "hung")
        hang = status["hang"]
        marks = {rank["rank"]: rank["hung"] for rank in status["ranks"]}
        print(
            f"run {number + 1}: status said hung {said:.1f} s after the freeze "
            f"(window {hang['window_s']:g} s; recorded {recorded - hang['since']:.1f} s after "
            f"the last step); marks {marks}",
            flush=True,
        )
        return said
    finally:
        kill_run(cli, hosts, run_id)


if __name__ == "__main__":
    main()
