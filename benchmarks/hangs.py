"""No false hangs: healthy runs whose slow parts each outlast the hang window are never called
hung, judged by their supervisors alone (nothing follows them).

Each run is a user's script with events (``tests.run.bed.PHASES``) on two bed hosts, one rank
each: a first step of ``--first-step`` seconds (compiling; before an attempt's first step the
window is 10 minutes), then a checkpoint save every 10 steps that takes rank 0 ``--save``
seconds (a slow filesystem; the other rank waits in a barrier), ``--saves`` of them, then it
ends. The saves are longer than the window its supervisor states (20 s for steps of 0.1 s), so
only the phases the script reports (``phase`` events) keep them from being called hung; a
window made longer instead fails the test bed's frozen-rank test
(``tests/run/test_supervisor_testbed.py``), which must name a frozen rank within 35 s.

``--runs`` runs (default 20), ``--at-once`` at a time (default 4): every state each run's record
went through, and the runs that were ever ``hung`` (target: none) or did not complete.

Run as root from the repository root: ``.venv/bin/python benchmarks/hangs.py`` (about 12
minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.run.bed import PHASES
from tests.testbed import TestBed

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PREFIX = "ddbh"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--at-once", type=int, default=4)
    parser.add_argument("--first-step", type=float, default=25.0)
    parser.add_argument("--save", type=float, default=25.0)
    parser.add_argument("--saves", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddptui-bench-") as tmp:
        work = Path(tmp)
        bed = TestBed.start(4, work / "bed", prefix=PREFIX)
        try:
            _bench(bed, work, args)
        finally:
            bed.stop()


def _bench(bed: TestBed, work: Path, args: argparse.Namespace) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
    script = work / "project" / "phases.py"
    script.parent.mkdir()
    script.write_text(PHASES)
    steps = 10 * args.saves
    job = {
        "script": str(script),
        "args": [str(args.first_step), "10", str(args.save), str(args.saves), str(steps)],
    }
    pairs = [bed.hosts[:2], bed.hosts[2:]]
    files = [
        bed.write_hosts_file(
            work / f"hosts{number}.toml", hosts, cluster={"master_port": "auto"}, job=job
        )
        for number, hosts in enumerate(pairs)
    ]
    print(
        f"{args.runs} runs, {args.at_once} at a time: first step {args.first_step:g} s, "
        f"{args.saves} saves of {args.save:g} s",
        flush=True,
    )
    hung, unfinished = [], []
    began = time.monotonic()
    for first in range(0, args.runs, args.at_once):
        numbers = range(first, min(first + args.at_once, args.runs))
        runs = {number: _launch(env, files[number % len(files)]) for number in numbers}
        for number, run_id in runs.items():
            record = _until_over(env, run_id)
            states = [change["state"] for change in record["states"]]
            print(f"run {number + 1:2d} {run_id}: {' > '.join(states)}", flush=True)
            if "hung" in states:
                hung.append(run_id)
            if states[-1] != "completed":
                unfinished.append(run_id)
    took = time.monotonic() - began
    print(
        f"\n{args.runs - len(hung)} of {args.runs} runs never hung (target: all); "
        f"{args.runs - len(unfinished)} completed; {took / 60:.1f} min"
    )
    if hung or unfinished:
        print(
            f"hung: {', '.join(hung) or 'none'}; not completed: {', '.join(unfinished) or 'none'}"
        )


def _ddptui(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddptui", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def _launch(env: dict[str, str], hosts_file: Path) -> str:
    done = _ddptui(env, "launch", str(hosts_file), "--detach")
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return done.stdout.strip()


def _until_over(env: dict[str, str], run_id: str) -> dict[str, Any]:
    """The run's record once it has ended (polled as a user would, every 2 s)."""
    deadline = time.monotonic() + 600
    store = Path(env["XDG_STATE_HOME"]) / "ddptui" / "runs"
    while time.monotonic() < deadline:
        status = json.loads(_ddptui(env, "status", run_id, "--json").stdout)
        if status["state"] in ("completed", "failed", "stopped"):
            return tomllib.loads((store / run_id / "run.toml").read_text())
        time.sleep(2)
    raise SystemExit(f"run {run_id} did not end in 600 s")


if __name__ == "__main__":
    main()
