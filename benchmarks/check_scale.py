"""``ddptui check`` against 16 and 128 (or 512) in-process SSH hosts that answer with recorded
output, side by side in one run (issue 33: 128 within 2× the time of 16; issue 45: 512 within
2.5×).

Run: ``.venv/bin/python benchmarks/check_scale.py [--hosts 16,128] [--rounds 3]
[--probe-s 0.1] [--profile PATH] [--console PATH]``. The hosts are the demo's SSH servers
(``ddptui/demo/sshd.py``: real asyncssh, a host key each, key-only login, each on its own port
of 127.0.0.1) on a thread of this process; instead of running a session's command, each
answers as a host whose probe cache is warm: the probe after ``--probe-s`` (0.1 s: what a warm
probe took on this machine) with the recorded H200 document (tests/fixtures/probe, its
hostname and workdir identity the host's own), node 0's port listener with a port and every
worker's connect with success. ``ddptui check`` runs as users run it, a process of its own, so
what is timed is ddptui's side: the SSH connections, the commands, the parsing and the
judging. The sizes alternate round by round; printed: each round's seconds, the medians and
their ratio. With ``--console``, last, the
console opens on the most hosts in a tmux pane of 160×48 (``python -m ddptui HOSTS``, as users
open it): how long until its health screen says the check's verdict, its CPU, and the pane as
it then stands, written to PATH (issue 45: usable at 512 hosts, the odd hosts first).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncssh

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.loopback import loopback_hosts
from benchmarks.procfs import cpu_seconds
from ddptui.check.scripts import CONNECT, LISTENER
from ddptui.demo.sshd import LoopbackSshd
from tests.helpers.hostile_server import command_argv
from tests.ui.terminal import Terminal

PROBES = Path(__file__).resolve().parents[1] / "tests/fixtures/probe"
RECORDED = PROBES / "h200_idle_nvml.json"
BUSY = PROBES / "h200_busy_nvml.json"
"""The H200 with a GPU another process holds: the console's odd hosts answer with it."""
OLDER_TORCH = "2.10.0+cu130"


class RecordedSshd(LoopbackSshd):
    """The demo's SSH hosts, answering the check's commands from recorded output."""

    probe_s = 0.1
    odd: frozenset[str] = frozenset()
    """The hosts that answer as the busy H200 with an older torch (the console's run)."""

    async def _run(self, process: asyncssh.SSHServerProcess[bytes], home: Path) -> None:
        argv = command_argv(process.command or "")
        status = 0
        if argv[1:2] == ["-"]:
            await process.stdin.read()
            await asyncio.sleep(self.probe_s)
            document = _probe(home.name, argv[2:], home.name in self.odd)
            process.stdout.write(json.dumps(document).encode() + b"\n")
        elif argv[1:3] == ["-c", LISTENER]:
            process.stdout.write(b"ready 29500\n")
            await asyncio.wait_for(process.wait_closed(), float(argv[4]))
        elif argv[1:3] != ["-c", CONNECT]:
            process.stderr.write(f"not a command of the check: {argv[:2]}\n".encode())
            status = 127
        process.exit(status)


def _probe(name: str, args: list[str], odd: bool = False) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((BUSY if odd else RECORDED).read_text())
    if odd:
        document["torch"]["version"] = OLDER_TORCH
    document["host"] = {"hostname": name, "fqdn": name, "addresses": ["127.0.0.1"]}
    document["time"] = time.time()
    document["workdir_id"] = {"id": hashlib.md5(name.encode()).hexdigest(), "inode": 4242}
    options = dict(zip(args[::2], args[1::2], strict=False))
    document.pop("port", None)
    document.pop("master", None)
    if "--master-port" in options:
        document["port"] = {"port": int(options["--master-port"]), "in_use": False}
    if "--master-addr" in options:
        document["master"] = {"name": options["--master-addr"], "addresses": ["127.0.0.1"]}
    return document


def check(hosts_file: Path, profile: str = "") -> tuple[float, float, float, float]:
    """``ddptui check --json``: the command's seconds, the check's own (``elapsed_s``: from
    its first connection to its findings, without the command's start), the command's CPU
    seconds, and the simulated hosts' (this process's: its main thread only waits). With
    ``profile``, the command runs under cProfile, its stats written there."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    began = time.monotonic()
    profiled = ["-m", "cProfile", "-o", profile] if profile else []
    done = subprocess.run(
        [sys.executable, *profiled, "-m", "ddptui", "check", str(hosts_file), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    took = time.monotonic() - began
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    own_after = resource.getrusage(resource.RUSAGE_SELF)
    client = (children_after.ru_utime + children_after.ru_stime) - (
        children.ru_utime + children.ru_stime
    )
    hosts = (own_after.ru_utime + own_after.ru_stime) - (own.ru_utime + own.ru_stime)
    try:
        report = json.loads(done.stdout)
    except ValueError:
        raise SystemExit(f"the check printed no report:\n{done.stdout}\n{done.stderr}") from None
    if done.returncode != 0 or not report.get("healthy"):
        raise SystemExit(f"the check did not find the hosts healthy:\n{done.stdout[-3000:]}")
    return took, float(report["elapsed_s"]), client, hosts


VERDICT = ("ready", "not healthy")
"""What the health screen's summary says once the check is done."""


def console(hosts_file: Path, snapshot: str) -> None:
    """The console on ``hosts_file`` in tmux, until its check's verdict shows. A few hosts
    far apart answer as the busy H200 with an older torch: the screen should list them
    first."""
    RecordedSshd.odd = frozenset(f"rec-{index:03d}" for index in (77, 213, 398))
    terminal = Terminal(f"ddptui-check-scale-{os.getpid()}")
    began = time.monotonic()
    terminal.start([sys.executable, "-m", "ddptui", str(hosts_file)], {}, (160, 48))
    try:
        shell = terminal.tmux("list-panes", "-t", "console", "-F", "#{pane_pid}").split()[0]
        pane = terminal.wait_for(
            "the check's verdict", lambda text: any(word in text for word in VERDICT), 600
        )
        took = time.monotonic() - began
        child = Path(f"/proc/{shell}/task/{shell}/children").read_text().split()[0]
        cpu = cpu_seconds(int(child))
    finally:
        terminal.close()
    Path(snapshot).write_text(pane)
    print(
        f"the console on {hosts_file.name}: the verdict shown after {took:.1f} s, CPU {cpu:.1f} s"
    )
    print(pane)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="16,128")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--probe-s", type=float, default=RecordedSshd.probe_s)
    parser.add_argument(
        "--profile",
        default="",
        help="after the rounds, one check of the most hosts profiled, to PATH",
    )
    parser.add_argument(
        "--console", default="", help="then the console on the most hosts, its pane to PATH"
    )
    args = parser.parse_args()
    counts = [int(count) for count in args.hosts.split(",")]
    RecordedSshd.probe_s = args.probe_s
    names = [f"rec-{index:03d}" for index in range(max(counts))]
    with (
        tempfile.TemporaryDirectory(prefix="ddptui-check-scale-") as work,
        loopback_hosts(Path(work), RecordedSshd, names) as loopback,
    ):
        served = loopback.servers.hosts
        files = {}
        for count in counts:
            files[count] = Path(work) / f"hosts-{count}.toml"
            files[count].write_text(loopback.hosts_toml(served[:count], 8))
        taken: dict[int, list[tuple[float, float, float, float]]] = {c: [] for c in counts}
        for round_ in range(1, args.rounds + 1):
            for count in counts if round_ % 2 else reversed(counts):
                taken[count].append(check(files[count]))
            each = ", ".join(
                f"{count} hosts {wall:.2f} s ({own:.2f} s its own; CPU {client:.2f} s "
                f"ddptui, {hosts:.2f} s the hosts)"
                for count in counts
                for wall, own, client, hosts in taken[count][-1:]
            )
            print(f"round {round_}: {each}", flush=True)
        if args.profile:
            check(files[max(counts)], args.profile)
        if args.console:
            console(files[max(counts)], args.console)
    for which, name in ((0, "the command"), (1, "the check's own time")):
        medians = {}
        for count, times in taken.items():
            values = [pair[which] for pair in times]
            medians[count] = statistics.median(values)
            print(
                f"{name}, {count} hosts: median {medians[count]:.2f} s "
                f"({min(values):.2f}–{max(values):.2f}, {len(values)} rounds)"
            )
        first, *others = counts
        for count in others:
            ratio = medians[count] / medians[first]
            target = "2.5x (issue 45)" if count > 128 else "2x (issue 33)"
            print(f"{name}, {count} vs {first} hosts: {ratio:.2f}x (target <= {target})")


if __name__ == "__main__":
    main()
