"""Fan-out of ``ddptui check``: 1 host vs N hosts vs pdsh running the same probe, one run.

Issue #5 targets: N hosts in at most 1.5x the time of one host, no slower than pdsh, and one
host that never answers (link cut) delaying the whole check by at most the connect timeout.

Run as root from the repository root: ``.venv/bin/python benchmarks/check_fanout.py``
(``--hosts N``, default 16; ``--repeat R``, default 2; about 4-5 minutes on 2 cores).

Every test-bed host shares this machine's CPUs, while real hosts each have their own, and the
probe imports torch (seconds of CPU) on every host. So N hosts here cost N times the CPU of one
and the N-host time has a CPU-bound floor of ``N x probe CPU / cores`` that a real cluster does
not have. The table prints that floor beside the measured times, the CPU each measurement used
(client side, on the test-bed hosts, and by everything else on the machine), and "fan-out
overhead" rows that run ``true`` instead of the probe: SSH fan-out alone, a fraction of a
CPU-second per host, which is the part of the scaling that is ddptui's own. The one-host-cut
rows cut a worker's link (node 0 is needed for the master-port test) for the whole call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The test bed lives in the tests package, importable only from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddptui.config import load_config
from ddptui.probe import PROBE_SOURCE, probe_args
from ddptui.remote.connection import RemoteCluster
from tests.testbed import TestBed, TestHost, cut_link, restore_link

PREFIX = "ddbn"
DDPTUI = Path(sys.executable).parent / "ddptui"
PDSH = "/usr/bin/pdsh"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1
FANOUT_REPEAT = 5


@dataclass
class Sample:
    wall: float
    client_cpu: float
    """Our process and its children: ddptui or pdsh and its ssh clients."""
    host_cpu: float
    """Everything the test-bed hosts ran: sshd sessions, shells, probes, torch imports."""
    machine_cpu: float
    """Busy CPU of the whole machine, other engineers' tests included."""
    load1: float

    @property
    def other_cpu(self) -> float:
        return max(0.0, self.machine_cpu - self.client_cpu - self.host_cpu)

    @property
    def own_cpu(self) -> float:
        return self.client_cpu + self.host_cpu

    @property
    def busy_pct(self) -> float:
        """How much of the machine's CPU was in use: near 100 means CPU-bound."""
        return 100 * self.machine_cpu / (self.wall * CORES)

    @property
    def load_adjusted_floor(self) -> float:
        """Our CPU over the cores the other suites left us: the wall time if CPU-bound."""
        left = max(0.1, CORES - self.other_cpu / self.wall)
        return self.own_cpu / left


@dataclass
class Series:
    label: str
    samples: list[Sample] = field(default_factory=list)

    def median(self, attribute: str) -> float:
        return float(statistics.median(getattr(sample, attribute) for sample in self.samples))

    @property
    def wall(self) -> float:
        return self.median("wall")


def _machine_busy() -> float:
    # First line of /proc/stat: user nice system idle iowait irq softirq steal …, in ticks.
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


def _listener_cpu(pid: int) -> float:
    """The sshd listener's own CPU plus that of every session it forked and reaped.

    Each level (listener → per-connection sshd → shell → python → torch child) waits for its
    children, so once the sessions are gone their CPU has rolled up into the listener's cutime.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    rest = stat.rsplit(")", 1)[1].split()
    # rest[0] is field 3 (state): utime, stime, cutime, cstime are fields 14-17.
    return sum(int(value) for value in rest[11:15]) / CLOCK_TICKS


def _has_sessions(pid: int) -> bool:
    try:
        return bool(Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
    except OSError:
        return False


def _hosts_cpu(bed: TestBed) -> float:
    # Sessions close a moment after the client goes; their CPU counts only once reaped.
    deadline = time.monotonic() + 15
    pids = [host.state.sshd.pid for host in bed.hosts if host.state.sshd is not None]
    while any(_has_sessions(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return sum(_listener_cpu(pid) for pid in pids)


def _own_cpu() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def measure(bed: TestBed, action: Callable[[], None]) -> Sample:
    load1 = os.getloadavg()[0]
    # Our own CPU is read closest to the action, so the polling in _hosts_cpu stays out of it.
    hosts = _hosts_cpu(bed)
    machine, client = _machine_busy(), _own_cpu()
    started = time.monotonic()
    action()
    wall = time.monotonic() - started
    client_cpu, machine_cpu = _own_cpu() - client, _machine_busy() - machine
    return Sample(
        wall=wall,
        client_cpu=client_cpu,
        host_cpu=_hosts_cpu(bed) - hosts,
        machine_cpu=machine_cpu,
        load1=load1,
    )


def run_ddptui(hosts_file: Path, expect_reachable: int, expect_total: int) -> None:
    done = subprocess.run(
        [str(DDPTUI), "check", "--json", str(hosts_file)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode not in (0, 1):
        raise SystemExit(f"ddptui check exited {done.returncode}:\n{done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    probed = sum(1 for host in report["hosts"] if host["facts"] is not None)
    if len(report["hosts"]) != expect_total or probed != expect_reachable:
        raise SystemExit(
            f"ddptui check probed {probed}/{len(report['hosts'])} hosts,"
            f" expected {expect_reachable}/{expect_total}:\n{done.stdout[-3000:]}"
        )


def pdsh_argv(bed: TestBed, hosts: Sequence[TestHost], command: Sequence[str]) -> list[str]:
    return [
        PDSH,
        "-R",
        "ssh",
        "-l",
        bed.user,
        # The same connect timeout as the hosts file gives ddptui.
        "-t",
        "3",
        "-f",
        str(max(32, len(hosts))),
        "-w",
        ",".join(host.address for host in hosts),
        shlex.join(command),
    ]


def pdsh_env(bed: TestBed) -> dict[str, str]:
    return {**os.environ, "PDSH_SSH_ARGS_APPEND": shlex.join(bed.ssh_options())}


def run_pdsh(
    bed: TestBed, hosts: Sequence[TestHost], command: Sequence[str], *, json_out: bool
) -> None:
    done = subprocess.run(
        pdsh_argv(bed, hosts, command),
        env=pdsh_env(bed),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"pdsh exited {done.returncode}:\n{done.stderr[-2000:]}")
    if json_out:
        # pdsh prefixes every line with "ADDRESS: "; one JSON document per host.
        documents = [line.split(": ", 1)[1] for line in done.stdout.splitlines()]
        parsed = [json.loads(document) for document in documents]
        if len(parsed) != len(hosts) or any("torch" not in doc for doc in parsed):
            raise SystemExit(f"pdsh: {len(parsed)} probe documents for {len(hosts)} hosts")


async def _fan_out_true(hosts_file: Path) -> None:
    config = load_config(hosts_file)
    async with RemoteCluster(
        config.ordered_hosts,
        connect_timeout=config.cluster.connect_timeout,
        max_parallel_connects=config.cluster.max_parallel_connects,
    ) as remote:
        # Connect and run in one go per host, as check_cluster does.
        await asyncio.gather(
            *(remote.run(host, ["true"], timeout=30) for host in config.ordered_hosts)
        )


def probe_cpu_locally(bed: TestBed, repeat: int) -> tuple[float, float]:
    """Median (wall, CPU) of one probe run here, outside SSH: the work each host does."""
    argv = [bed.python, "-", *probe_args(str(bed.hosts[0].workdir))]
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        subprocess.run(argv, input=PROBE_SOURCE, text=True, capture_output=True, check=True)
        walls.append(time.monotonic() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(
            after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
        )
    return statistics.median(walls), statistics.median(cpus)


def _row(series: Series) -> str:
    walls = [sample.wall for sample in series.samples]
    return (
        f"{series.label:<34} {series.wall:>7.2f} {min(walls):>7.2f} {max(walls):>7.2f}"
        f" {series.median('client_cpu'):>7.2f} {series.median('host_cpu'):>7.2f}"
        f" {series.median('other_cpu'):>7.2f} {series.median('busy_pct'):>5.0f}%"
        f" {series.median('load1'):>6.2f}"
    )


def _header() -> str:
    return (
        f"{'measurement':<34} {'wall s':>7} {'min':>7} {'max':>7}"
        f" {'cli CPU':>7} {'hostCPU':>7} {'others':>7} {'busy':>6} {'load1':>6}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=16, help="hosts in the big cluster")
    parser.add_argument("--repeat", type=int, default=2, help="samples of each check run")
    args = parser.parse_args()
    n = args.hosts
    began = time.monotonic()
    print(f"{CORES} cores; load average at start {os.getloadavg()[0]:.2f}", flush=True)

    with tempfile.TemporaryDirectory(prefix="ddptui-fanout-") as tmp:
        bed = TestBed.start(n, Path(tmp) / "bed", prefix=PREFIX)
        try:
            print(f"test bed of {n} hosts up in {bed.up_seconds:.1f} s", flush=True)
            results = run_all(bed, Path(tmp), n, args.repeat)
        finally:
            bed.stop()
    report(results, n)
    print(f"benchmark took {time.monotonic() - began:.0f} s")


@dataclass
class Results:
    probe_wall: float
    probe_cpu: float
    connect_timeout: float
    cut_host: str
    series: dict[str, Series]


def run_all(bed: TestBed, tmp: Path, n: int, repeat: int) -> Results:
    one = bed.write_hosts_file(tmp / "hosts1.toml", bed.hosts[:1])
    many = bed.write_hosts_file(tmp / f"hosts{n}.toml")
    connect_timeout = load_config(many).cluster.connect_timeout
    # A worker, not node 0: a dead node 0 would also skip the master-port test.
    cut = bed.hosts[-1]

    # Hosts share this filesystem, so one copy of the probe serves every host under pdsh,
    # which (unlike ddptui) cannot send each host the script on stdin.
    script = tmp / "probe.py"
    script.write_text(PROBE_SOURCE)
    # Same Python, script and arguments as ddptui sends; the workdir only feeds a
    # disk_usage() call, so node 0's serves all (ddptui also passes node 0 --master-port).
    probe_command = [bed.python, str(script), *probe_args(str(bed.hosts[0].workdir))]

    probe_wall, probe_cpu = probe_cpu_locally(bed, 3)
    print(f"one probe run locally: {probe_wall:.2f} s wall, {probe_cpu:.2f} CPU-s", flush=True)

    series = {
        key: Series(label)
        for key, label in [
            ("d1", "ddptui check, 1 host"),
            ("dn", f"ddptui check, {n} hosts"),
            ("pn", f"pdsh probe, {n} hosts"),
            ("dcut", f"ddptui check, {n} hosts, 1 cut"),
            ("t1", "fan-out: ddptui true, 1 host"),
            ("tn", f"fan-out: ddptui true, {n} hosts"),
            ("tcut", f"fan-out: ddptui true, {n}, 1 cut"),
            ("p1", "fan-out: pdsh true, 1 host"),
            ("pt", f"fan-out: pdsh true, {n} hosts"),
        ]
    }

    def cut_run(action: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            cut_link(cut)
            try:
                action()
            finally:
                restore_link(cut)

        return run

    checks: dict[str, Callable[[], None]] = {
        "d1": lambda: run_ddptui(one, 1, 1),
        "dn": lambda: run_ddptui(many, n, n),
        "pn": lambda: run_pdsh(bed, bed.hosts, probe_command, json_out=True),
        "dcut": cut_run(lambda: run_ddptui(many, n - 1, n)),
    }
    fan_outs: dict[str, Callable[[], None]] = {
        "t1": lambda: asyncio.run(_fan_out_true(one)),
        "tn": lambda: asyncio.run(_fan_out_true(many)),
        "tcut": cut_run(lambda: asyncio.run(_fan_out_true(many))),
        "p1": lambda: run_pdsh(bed, bed.hosts[:1], ["true"], json_out=False),
        "pt": lambda: run_pdsh(bed, bed.hosts, ["true"], json_out=False),
    }

    # Warm-ups, not recorded: page cache, asyncssh imports, the first key loads.
    checks["d1"]()
    fan_outs["tn"]()
    fan_outs["pt"]()

    # Alternate, reversing the order every other round, so drifting background load from
    # concurrent test suites falls on every measurement alike.
    for round_ in range(FANOUT_REPEAT):
        order = list(fan_outs) if round_ % 2 == 0 else list(reversed(fan_outs))
        for key in order:
            series[key].samples.append(measure(bed, fan_outs[key]))
    for round_ in range(repeat):
        order = list(checks) if round_ % 2 == 0 else list(reversed(checks))
        for key in order:
            sample = measure(bed, checks[key])
            series[key].samples.append(sample)
            print(
                f"  round {round_ + 1}: {series[key].label:<32} {sample.wall:6.2f} s"
                f"  (load1 {sample.load1:.2f})",
                flush=True,
            )
    return Results(probe_wall, probe_cpu, connect_timeout, cut.name, series)


def report(results: Results, n: int) -> None:
    s = results.series
    d1, dn, pn, dcut = s["d1"], s["dn"], s["pn"], s["dcut"]
    t1, tn, tcut, pt = s["t1"], s["tn"], s["tcut"], s["pt"]
    print()
    print(_header())
    for key in ("d1", "dn", "pn", "dcut", "t1", "tn", "tcut", "p1", "pt"):
        print(_row(s[key]))
    print(
        "  medians. cli CPU: ddptui, or pdsh and its ssh clients; hostCPU: all the test-bed"
        " hosts ran\n  (sshd, shells, probes, torch imports); others: the rest of the machine"
        " (concurrent test\n  suites); busy: machine CPU in use, of all cores."
    )
    print()
    floor = n * results.probe_cpu / CORES
    print(
        f"probe CPU per host (local run, no SSH): {results.probe_cpu:.2f} CPU-s"
        f" ({results.probe_wall:.2f} s wall); via ddptui on 1 host: {d1.median('host_cpu'):.2f}"
    )
    on_bed = dn.median("host_cpu") / n
    print(
        f"probe CPU per host on the test bed in the {n}-host check (sshd and the master-port"
        f" test included): {on_bed:.2f} CPU-s"
    )
    # torch's import cost swings with the machine's state (page cache, other suites): the
    # floor from this run's own CPU below is the one to compare with.
    print(
        f"CPU-bound floor for {n} hosts: {n} x {results.probe_cpu:.2f} / {CORES} cores"
        f" = {floor:.2f} s (local probe); {n} x {on_bed:.2f} / {CORES} = {n * on_bed / CORES:.2f}"
        " s (test bed)"
    )
    for series in (d1, dn, pn):
        own = series.median("own_cpu")
        print(
            f"  {series.label:<24} {series.wall:6.2f} s; its own CPU {own:6.2f} CPU-s"
            f" / {CORES} = {own / CORES:6.2f} s; over the cores the others left:"
            f" {series.median('load_adjusted_floor'):6.2f} s"
        )
    print()
    print(f"ratio ddptui{n}/ddptui1          {dn.wall / d1.wall:6.2f}  (target <= 1.5)")
    print(f"ratio ddptui{n}/pdsh{n}           {dn.wall / pn.wall:6.2f}  (target <= 1.0)")
    print(
        f"ratio fan-out ddptui{n}/ddptui1  {tn.wall / t1.wall:6.2f}"
        f"  ({tn.wall * 1000:.0f} ms vs {t1.wall * 1000:.0f} ms)"
    )
    print(
        f"ratio fan-out ddptui{n}/pdsh{n}   {tn.wall / pt.wall:6.2f}"
        f"  ({tn.wall * 1000:.0f} ms vs {pt.wall * 1000:.0f} ms)"
    )
    # A model, not a measurement: with a core per host the probes no longer queue for CPU,
    # and what N hosts add is the fan-out's extra time (the master-port test, which one host
    # skips, is left out: two Python starts in a row).
    model = d1.wall + tn.wall - t1.wall
    print(
        f"model, every host with its own CPUs: 1-host check + fan-out's extra for {n} hosts ="
        f" {model:.2f} s, ratio {model / d1.wall:.2f}"
    )
    print()
    timeout = results.connect_timeout
    for what, cut, healthy in (("check", dcut, dn), ("fan-out", tcut, tn)):
        delay = cut.wall - healthy.wall
        verdict = "within" if delay <= timeout else "OVER"
        print(
            f"one host cut ({results.cut_host}), {what:<7}: {cut.wall:6.2f} s vs"
            f" {healthy.wall:6.2f} s healthy, delay {delay:+.2f} s,"
            f" {verdict} connect_timeout = {timeout:g} s"
        )


if __name__ == "__main__":
    main()
