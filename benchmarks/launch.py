"""The runs layer on the test bed: launch, resume, stop, watch and failure detection.

Targets, each printed as measured in this one run:

- launch latency: ``ddptui launch`` until every rank's first step event, against the same
  torchrun commands (what ``--dry-run`` printed) started by hand over OpenSSH on code already
  staged: target <= 1.1x. As a user would, the bed is checked once first; each launch stands
  on the check kept from the one before (a healthy check of the same hosts file from the last
  5 minutes), and ``launch --recheck``, which checks every host again, is measured beside it.
- resume latency: ``ddptui resume`` of a stopped run until every rank's first step of the new
  attempt, against the fresh launch's time (check excluded there, staging included): target
  <= 1.0x.
- stop latency: ``ddptui stop`` until no process of the run is left, against the trainer's own
  stop (``touch control/stop`` and wait for the processes to go): target <= that + 2 s.
- watch cost: 64 ranks x 20 step events/s (writers on the hosts append real-shaped events),
  followed by the run's supervisor with two ``ddptui logs --follow --events`` attached: the
  supervisor < 10% of one core, each viewer < 3%.
- failure detection: a link cut until ``status --json`` says the run failed, polled as a user
  would with nothing following it, in each of 5 tries: target <= 15 s every time.
- staging: a 50 MB project uploaded to 3 hosts with empty caches, then staged again unchanged
  (a relaunch): target <= 0.2x.

Run as root from the repository root: ``.venv/bin/python benchmarks/launch.py`` (about 4
minutes on 2 cores; ``--only launch|resume|stop|watch|cut|staging``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tomli_w

from benchmarks.procfs import cpu_seconds
from ddptui.config import Config, load_config
from ddptui.layout import code_dir, host_run_dir
from ddptui.remote.connection import RemoteCluster
from ddptui.run.backends.ssh.launcher import stage
from ddptui.run.record import NodeRecord, RunRecord
from tests.testbed import TestBed, TestHost, cut_link, restore_link

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PREFIX = "ddbl"
HOSTS = 3
ARGS = [
    *("--width", "64", "--depth", "2", "--samples", "2048", "--batch-size", "16"),
    *("--lr", "1e-2", "--epochs", "100000", "--max-steps", "100000"),
]
WRITER = """
import json, os, sys, time
run_dir, first, count, rate, seconds = sys.argv[1], *map(int, sys.argv[2:5]), float(sys.argv[5])
os.makedirs(os.path.join(run_dir, "events"), exist_ok=True)
files = [open(os.path.join(run_dir, "events", f"rank{first + i}.jsonl"), "a") for i in range(count)]
step, start = 0, time.time()
while time.time() - start < seconds:
    step += 1
    for i, handle in enumerate(files):
        handle.write(json.dumps({"v": 1, "type": "step", "rank": first + i, "local_rank": i,
            "node_rank": 0, "world_size": 64, "time": time.time(), "epoch": 0, "step": step,
            "loss": 1.0 / step, "lr": 0.001, "samples_per_s": 1000.0, "step_time_s": 0.05,
            "rss_mib": 300.0}) + "\\n")
        handle.flush()
    time.sleep(max(0.0, start + step / rate - time.time()))
"""


class Bench:
    def __init__(self, bed: TestBed, work: Path) -> None:
        self.bed = bed
        self.work = work
        self.hosts = bed.hosts[:HOSTS]
        self.env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
        self.store = work / "state" / "ddptui" / "runs"
        self.hosts_file = bed.write_hosts_file(
            work / "hosts.toml", self.hosts, job={"nproc_per_node": 2, "args": ARGS}
        )

    def ddptui(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ddptui", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )

    def run_dir(self, host: TestHost, run_id: str) -> Path:
        return host.workdir / "runs" / run_id / f"node{self.hosts.index(host)}"

    def first_steps(
        self, dirs: Sequence[Path], ranks: int, began: float, attempt: int = 1
    ) -> float:
        """Seconds from ``began`` until every rank has written a step event in ``attempt``
        (its ``attempt``-th start event comes first)."""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            seen = 0
            for directory in dirs:
                for path in (directory / "events").glob("rank*.jsonl"):
                    text = path.read_text()
                    tail = text.split('"type":"start"')[attempt:]
                    if tail and '"type":"step"' in tail[-1]:
                        seen += 1
            if seen >= ranks:
                return time.monotonic() - began
            time.sleep(0.05)
        raise SystemExit("no step events within 180 s")

    def alive(self, marks: Sequence[str]) -> bool:
        wanted = {mark.encode() for mark in marks}
        for entry in Path("/proc").iterdir():
            try:
                environ = set((entry / "environ").read_bytes().split(b"\0"))
            except OSError:
                continue
            if environ & wanted:
                return True
        return False

    def marks(self, run_id: str) -> list[str]:
        return [f"DDPTUI_RUN_DIR={self.run_dir(host, run_id)}" for host in self.hosts]

    def wait_gone(self, marks: Sequence[str], began: float) -> float:
        while self.alive(marks):
            time.sleep(0.05)
        return time.monotonic() - began

    def launch(self, *flags: str) -> tuple[str, float]:
        began = time.monotonic()
        done = self.ddptui("launch", str(self.hosts_file), "--detach", *flags)
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        run_id = done.stdout.strip()
        dirs = [self.run_dir(host, run_id) for host in self.hosts]
        return run_id, self.first_steps(dirs, 2 * HOSTS, began)

    def by_hand(self, run_id: str) -> float:
        """The recorded commands, started with OpenSSH on every host at once, on staged code."""
        record = tomllib.loads((self.store / run_id / "run.toml").read_text())
        launches = []
        began = time.monotonic()
        for host, node in zip(self.hosts, record["nodes"], strict=True):
            staged = self.run_dir(host, run_id)
            argv = [arg.replace(str(staged), f"{staged}-by-hand") for arg in node["argv"]]
            env = {k: v.replace(str(staged), f"{staged}-by-hand") for k, v in node["env"].items()}
            # The same environment marks as ddptui's, so the same check finds the processes.
            env["DDPTUI_RUN_DIR"] = f"{staged}-by-hand"
            script = (
                f"cd {shlex.quote(code_dir(str(staged)))} && exec env "
                + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
                + " "
                + shlex.join(argv)
            )
            launches.append(
                subprocess.Popen(
                    self.bed.ssh_argv(host, ["sh", "-c", script]),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        dirs = [Path(f"{self.run_dir(host, run_id)}-by-hand") for host in self.hosts]
        took = self.first_steps(dirs, 2 * HOSTS, began)
        for launch in launches:
            launch.kill()
        marks = [f"DDPTUI_RUN_DIR={directory}" for directory in dirs]
        for entry in Path("/proc").iterdir():
            try:
                environ = set((entry / "environ").read_bytes().split(b"\0"))
                if environ & {mark.encode() for mark in marks}:
                    os.kill(int(entry.name), 9)
            except (OSError, ValueError):
                continue
        return took


def section(title: str) -> None:
    print(f"\n== {title}", flush=True)


def bench_launch(bench: Bench, rounds: int) -> None:
    section(f"launch latency: until every rank's first step event ({rounds} rounds, alternating)")
    # As a user would: check, then launch. The launch stands on that check (or the last
    # launch's); --recheck makes it check again.
    checked = bench.ddptui("check", str(bench.hosts_file))
    if checked.returncode != 0:
        raise SystemExit(checked.stdout + checked.stderr)
    ours, by_hand, rechecked = [], [], []
    for _ in range(rounds):
        run_id, took = bench.launch()
        ours.append(took)
        bench.ddptui("stop", run_id, "--kill")
        by_hand.append(bench.by_hand(run_id))
        run_id, took = bench.launch("--recheck")
        rechecked.append(took)
        bench.ddptui("stop", run_id, "--kill")
    ddptui, hand = statistics.median(ours), statistics.median(by_hand)
    again = statistics.median(rechecked)
    print(f"ddptui launch (recent check, stage, start): median {ddptui:6.1f} s  {_each(ours)}")
    print(
        f"ddptui launch --recheck (check, stage, start): median {again:6.1f} s  {_each(rechecked)}"
    )
    print(f"torchrun by hand over ssh (staged):          median {hand:6.1f} s  {_each(by_hand)}")
    ratios = [a / b for a, b in zip(ours, by_hand, strict=True)]
    print(
        f"ratio of medians {ddptui / hand:.2f} (target <= 1.1); each round's: "
        + ", ".join(f"{ratio:.2f}" for ratio in ratios)
    )
    print(f"with a new check: ratio of medians {again / hand:.2f}")


def bench_resume(bench: Bench, rounds: int) -> None:
    section(f"resume latency: until every rank's first step of the new attempt ({rounds} rounds)")
    launches, resumes = [], []
    for _ in range(rounds):
        began = time.monotonic()
        started = bench.ddptui("launch", str(bench.hosts_file), "--detach", "--force")
        if started.returncode != 0:
            raise SystemExit(started.stderr)
        run_id = started.stdout.strip()
        dirs = [bench.run_dir(host, run_id) for host in bench.hosts]
        launches.append(bench.first_steps(dirs, 2 * HOSTS, began))
        bench.ddptui("stop", run_id)
        began = time.monotonic()
        resumed = bench.ddptui("resume", run_id, "--detach")
        if resumed.returncode != 0:
            raise SystemExit(resumed.stderr)
        resumes.append(bench.first_steps(dirs, 2 * HOSTS, began, attempt=2))
        bench.ddptui("stop", run_id, "--kill")
    launch, resume = statistics.median(launches), statistics.median(resumes)
    print(f"launch --detach --force (stage + start): median {launch:6.1f} s  {_each(launches)}")
    print(f"resume --detach:                         median {resume:6.1f} s  {_each(resumes)}")
    print(f"ratio {resume / launch:.2f} (target <= 1.0)")


def _each(values: Sequence[float]) -> str:
    return "(each: " + ", ".join(f"{value:.1f}" for value in values) + ")"


def bench_stop(bench: Bench, rounds: int) -> None:
    section(f"stop latency: until no process of the run is left (median of {rounds}, alternating)")
    ours, own, asked, graceful = [], [], [], True
    for _ in range(rounds):
        run_id, _ = bench.launch()
        time.sleep(3)
        request = bench.run_dir(bench.hosts[0], run_id) / "control" / "stop"
        seen: list[float] = []
        watcher = threading.Thread(target=_appears, args=(request, seen), daemon=True)
        began = time.monotonic()
        watcher.start()
        stop = bench.ddptui("stop", run_id)
        ours.append(bench.wait_gone(bench.marks(run_id), began))
        watcher.join()
        asked.append(seen[0] - began if seen else float("nan"))
        graceful = graceful and "stopped on its own" in stop.stderr
        run_id, _ = bench.launch()
        time.sleep(3)
        began = time.monotonic()
        (bench.run_dir(bench.hosts[0], run_id) / "control" / "stop").touch()
        own.append(bench.wait_gone(bench.marks(run_id), began))
    ddptui, trainer = statistics.median(ours), statistics.median(own)
    print(f"ddptui stop:                       {ddptui:6.1f} s (graceful every time: {graceful})")
    print(f"trainer's own stop (control file): {trainer:6.1f} s")
    print(f"difference {ddptui - trainer:+.1f} s (target <= +2 s)")
    rounds_text = "; ".join(f"{a:.1f} vs {b:.1f}" for a, b in zip(ours, own, strict=True))
    print(f"  each round, ddptui vs own: {rounds_text}")
    # The rest of a stop is the trainer's own (the same control file): what ddptui adds is the
    # time until that request is on node 0, which the machine's load does not blur.
    print(
        f"ddptui's own part, until control/stop is on node 0: median "
        f"{statistics.median(asked):.2f} s (each: {', '.join(f'{t:.2f}' for t in asked)})"
    )


def bench_watch(bench: Bench, seconds: float) -> None:
    section("watch cost: 64 ranks x 20 step events/s, the supervisor and two viewers")
    run_id = "20991231-000000-wtch"
    per_host = [22, 21, 21]
    writers = []
    first = 0
    for host, count in zip(bench.hosts, per_host, strict=True):
        directory = bench.run_dir(host, run_id)
        # Marked as the run's processes, as the trainer's would be, so they count as alive.
        marks = [f"DDPTUI_RUN_DIR={directory}", "DDPTUI_ATTEMPT=1"]
        writers.append(
            subprocess.Popen(
                [
                    *host.exec_prefix(),
                    "env",
                    *marks,
                    sys.executable,
                    "-c",
                    WRITER,
                    str(directory),
                    str(first),
                    str(count),
                    "20",
                    str(seconds + 30),
                ]
            )
        )
        first += count
    record_dir = bench.store / run_id
    record_dir.mkdir(parents=True)
    (record_dir / "hosts.toml").write_text(bench.hosts_file.read_text())
    nodes = [
        {
            "host": host.name,
            "address": host.address,
            "node_rank": rank,
            "nproc": count,
            "run_dir": str(bench.run_dir(host, run_id)),
            "argv": ["true"],
            "env": {},
        }
        for rank, (host, count) in enumerate(zip(bench.hosts, per_host, strict=True))
    ]
    now = time.time()
    (record_dir / "run.toml").write_text(
        tomli_w.dumps(
            {
                "version": 1,
                "id": run_id,
                "created": now,
                "hosts_file": str(bench.hosts_file),
                "entry": "trainer",
                "backend": "gloo",
                "master_addr": bench.hosts[0].address,
                "world_size": 64,
                "args": [],
                "state": "running",
                "nodes": nodes,
                "attempts": [{"number": 1, "started": now, "master_port": 1}],
                "states": [
                    {"state": "staging", "time": now, "detail": ""},
                    {"state": "starting", "time": now, "detail": ""},
                    {"state": "running", "time": now, "detail": ""},
                ],
            }
        )
    )
    time.sleep(2)
    # The first viewer finds no supervisor and starts one; the second attaches to it.
    viewers = [_viewer(bench, run_id)]
    time.sleep(3)
    viewers.append(_viewer(bench, run_id))
    # Read as fast as they print: a full pipe would hold them back.
    readers = [_Printed(viewer) for viewer in viewers]
    time.sleep(5)
    for reader in readers:
        reader.printed = 0
    supervisor = int((record_dir / "supervisor.pid").read_text())
    pids = [supervisor, *(viewer.pid for viewer in viewers)]
    start_cpu, start = [cpu_seconds(pid) for pid in pids], time.monotonic()
    lines = [0, 0]
    time.sleep(seconds)
    wall = time.monotonic() - start
    used = [
        (cpu_seconds(pid) - before) / wall * 100
        for pid, before in zip(pids, start_cpu, strict=True)
    ]
    lines = [viewer.printed for viewer in readers]
    for viewer in viewers:
        viewer.kill()
        viewer.wait()
    for writer in writers:
        writer.kill()
        writer.wait()
    bench.ddptui("stop", run_id, "--kill")
    printed = ", ".join(f"{count / wall:,.0f}" for count in lines)
    print(f"written: {64 * 20:,} event lines/s; the viewers printed {printed} lines/s")
    print(f"supervisor CPU: {used[0]:.1f}% of one core (target < 10%)")
    for index, share in enumerate(used[1:], 1):
        print(f"viewer {index} CPU: {share:.1f}% of one core (target < 3%)")


class _Printed(threading.Thread):
    """Counts the lines a viewer prints, reading them as they come."""

    def __init__(self, viewer: subprocess.Popen[bytes]) -> None:
        super().__init__(daemon=True)
        self.viewer = viewer
        self.printed = 0
        self.start()

    def run(self) -> None:
        assert self.viewer.stdout is not None
        while chunk := self.viewer.stdout.read1(1 << 16):
            self.printed += chunk.count(b"\n")


def _viewer(bench: Bench, run_id: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "ddptui", "logs", run_id, "--follow", "--events"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=bench.env,
    )


def _appears(path: Path, seen: list[float]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if path.exists():
            seen.append(time.monotonic())
            return
        time.sleep(0.005)


def bench_cut(bench: Bench, tries: int) -> None:
    section(
        f"failure detection: a cut link until `status --json` says failed, nothing following "
        f"({tries} tries)"
    )
    said, recorded = [], []
    for _ in range(tries):
        run_id, _ = bench.launch()
        cut = time.time()
        cut_link(bench.hosts[2])
        try:
            while (state := json_status(bench, run_id)["state"]) != "failed":
                if time.time() - cut > 120:
                    raise SystemExit(f"still {state} 120 s after the cut")
                time.sleep(0.25)
            said.append(time.time() - cut)
        finally:
            restore_link(bench.hosts[2])
        record = tomllib.loads((bench.store / run_id / "run.toml").read_text())
        failed = next(change["time"] for change in record["states"] if change["state"] == "failed")
        recorded.append(failed - cut)
        bench.ddptui("stop", run_id, "--kill")
    print(f"cut to failed in status --json: {_each(said)} s (target <= 15 s every time)")
    print(f"cut to failed in the record:     {_each(recorded)} s")


def json_status(bench: Bench, run_id: str) -> dict[str, object]:
    done = bench.ddptui("status", run_id, "--json")
    found = json.loads(done.stdout)
    assert isinstance(found, dict), done.stdout
    return found


def bench_staging(bench: Bench, rounds: int) -> None:
    section(
        f"staging a 50 MB project on {HOSTS} hosts: first upload, then unchanged ({rounds} rounds)"
    )
    project = bench.work / "project"
    (project / "data").mkdir(parents=True)
    for part in range(50):
        (project / "data" / f"part{part}.bin").write_bytes(os.urandom(1 << 20))
    (project / "train.py").write_text("print('train')\n")
    job = {"script": str(project / "train.py"), "max_upload_mb": 100}
    config = load_config(
        bench.bed.write_hosts_file(bench.work / "staging.toml", bench.hosts, job=job)
    )
    firsts, agains = [], []
    for round_ in range(rounds):
        for host in bench.hosts:
            shutil.rmtree(host.workdir / "code-cache", ignore_errors=True)
        firsts.append(asyncio.run(_staged(config, f"staging-{round_}-first")))
        agains.append(asyncio.run(_staged(config, f"staging-{round_}-again")))
    first, again = statistics.median(firsts), statistics.median(agains)
    print(f"first upload (empty caches): median {first:6.2f} s  {_each(firsts)}")
    print(f"unchanged relaunch:          median {again:6.2f} s  {_each(agains)}")
    print(f"ratio {again / first:.2f} (target <= 0.2)")


async def _staged(config: Config, run_id: str) -> float:
    """Seconds ``launcher.stage`` takes for a record of ``run_id`` on every host of ``config``."""
    nodes = [
        NodeRecord(
            host.name, host.address, rank, 1, host_run_dir(host.workdir, run_id, rank), [], {}
        )
        for rank, host in enumerate(config.ordered_hosts)
    ]
    record = RunRecord(run_id, time.time(), str(config.path), "script", "gloo", "", 3, [], nodes)
    async with RemoteCluster.for_config(config) as remote:
        began = time.monotonic()
        await stage(remote, config, record, say=lambda line: None)
        return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("launch", "resume", "stop", "watch", "cut", "staging"))
    parser.add_argument("--launch-rounds", type=int, default=3)
    parser.add_argument("--staging-rounds", type=int, default=3)
    parser.add_argument("--resume-rounds", type=int, default=3)
    parser.add_argument("--watch-seconds", type=float, default=30.0)
    parser.add_argument("--stop-rounds", type=int, default=3)
    parser.add_argument("--cut-tries", type=int, default=5)
    args = parser.parse_args()
    runs: dict[str, Callable[[Bench], None]] = {
        "launch": lambda bench: bench_launch(bench, args.launch_rounds),
        "resume": lambda bench: bench_resume(bench, args.resume_rounds),
        "stop": lambda bench: bench_stop(bench, args.stop_rounds),
        "watch": lambda bench: bench_watch(bench, args.watch_seconds),
        "cut": lambda bench: bench_cut(bench, args.cut_tries),
        "staging": lambda bench: bench_staging(bench, args.staging_rounds),
    }
    with tempfile.TemporaryDirectory(prefix="ddptui-bench-") as tmp:
        bed = TestBed.start(4, Path(tmp) / "bed", prefix=PREFIX)
        try:
            bench = Bench(bed, Path(tmp))
            for name, run in runs.items():
                if args.only in (None, name):
                    run(bench)
        finally:
            bed.stop()


if __name__ == "__main__":
    main()
