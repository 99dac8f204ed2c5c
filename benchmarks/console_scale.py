"""The console attached to a live run of 4,096 simulated ranks, in a real terminal: CPU, memory
and what it shows.

Run: ``.venv/bin/python benchmarks/console_scale.py [--size 512x8@5] [--transport socket]
[--warm-up 120] [--seconds 120] [--snapshot PATH]``. The run is ``benchmarks/scale.py``'s (the
simulated hosts and a real supervisor following them). The console is ``python -m ddptui`` in a
tmux pane of 160×48, started as a user starts it (its hosts file names one host on
127.0.0.1 where nothing listens, so its health check ends at once); ``R`` lists the runs and
enter attaches to the live one through its supervisor, as a second user's console would. After
the warm-up, the console's CPU (a share of one core, from ``/proc``) and its memory every 10 s
are measured, and the pane is captured with ``capture-pane``: the run screen as it is, then
with ``w`` (the worst node, expanded). The event loop's worst gap is ``console_load.py``'s to
measure (it runs the console in-process); this is the whole path, from the hosts to the pane.
Target (issue 45): at 4,096 ranks under 10% of a core, memory flat.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.procfs import cpu_seconds, memory_mib
from benchmarks.scale import RUN_ID, TRANSPORTS, Size, simulated_run
from tests.ui.terminal import Terminal

PANE = (160, 48)
RSS_EVERY_S = 10.0
NODE_ROW = re.compile(r"\bsim\d{4}\b")
"""A simulated node's name, as the run screen's rows show it."""


def console_pid(terminal: Terminal) -> int:
    """The console's process: the pane's shell runs it as its child."""
    shell = terminal.tmux("list-panes", "-t", "console", "-F", "#{pane_pid}").split()[0]
    children = Path(f"/proc/{shell}/task/{shell}/children").read_text().split()
    for child in children:
        if "ddptui" in Path(f"/proc/{child}/cmdline").read_text():
            return int(child)
    raise SystemExit(f"no console process under the pane's shell {shell}")


def attach(terminal: Terminal) -> None:
    """From the health screen to the live run's screen, as a user gets there."""
    terminal.wait_for("the health screen", lambda text: "runs" in text, 60)
    terminal.keys("R")
    terminal.wait_for("the runs list", lambda text: RUN_ID in text, 60)
    terminal.keys("Enter")
    terminal.wait_for("node rows", lambda text: len(NODE_ROW.findall(text)) >= 8, 120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="512x8@5")
    parser.add_argument("--transport", choices=TRANSPORTS, default="socket")
    parser.add_argument("--warm-up", type=float, default=120.0)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--snapshot", default="", help="write the captured panes to PATH")
    args = parser.parse_args()
    size = Size.parse(args.size)
    terminal = Terminal(f"ddptui-console-scale-{os.getpid()}")
    with (
        simulated_run(size, args.transport) as run,
        tempfile.TemporaryDirectory(prefix="ddptui-console-scale-") as work,
    ):
        hosts = Path(work) / "hosts.toml"
        hosts.write_text('[[hosts]]\nname = "head"\naddress = "127.0.0.1"\nport = 1\n')
        env = {"XDG_STATE_HOME": run.env["XDG_STATE_HOME"]}
        terminal.start([sys.executable, "-m", "ddptui", str(hosts)], env, PANE)
        try:
            attach(terminal)
            pid = console_pid(terminal)
            print(f"the console is process {pid}", flush=True)
            time.sleep(args.warm_up)
            pids = {
                "console": pid,
                "supervisor": run.supervisor.pid,
                "simulated hosts": run.sim.pid,
            }
            before = {name: cpu_seconds(each) for name, each in pids.items()}
            rss = [memory_mib(pid, "VmRSS")]
            began = time.monotonic()
            while (elapsed := time.monotonic() - began) < args.seconds:
                time.sleep(min(RSS_EVERY_S, args.seconds - elapsed))
                rss.append(memory_mib(pid, "VmRSS"))
            wall = time.monotonic() - began
            cpu = {
                name: (cpu_seconds(each) - before[name]) / wall * 100 for name, each in pids.items()
            }
            shown = terminal.screen()
            terminal.keys("w")
            time.sleep(2.0)
            worst = terminal.screen()
        finally:
            terminal.close()
    print(
        f"{size.ranks:,} ranks ({size.nodes} nodes x {size.per_node}) at {size.rate:g} steps/s "
        f"over {args.transport}, {wall:.0f} s after a {args.warm_up:g} s warm-up:\n"
        + "".join(f"  {name}: {share:.1f}% of a core\n" for name, share in cpu.items())
        + f"  console RSS every {RSS_EVERY_S:g} s: "
        + " ".join(f"{mib:.0f}" for mib in rss)
        + " MiB"
    )
    panes = f"{shown.rstrip()}\n\n(after w)\n\n{worst.rstrip()}\n"
    if args.snapshot:
        Path(args.snapshot).write_text(panes)
    print(panes)


if __name__ == "__main__":
    main()
