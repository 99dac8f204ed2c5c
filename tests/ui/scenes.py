"""Deterministic data for the console's screens, built from the recordings of a real H200 host
(tests/fixtures): probe documents (one GPU idle, one held by another process), a bf16 run's
step events, and the NCCL error of a run with a bad socket interface. No network."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ddptui.check import CheckReport, PortTest
from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig, SlurmConfig
from ddptui.health import HostCheck, evaluate
from ddptui.health.slurm import SlurmCheck, evaluate_slurm, parse_sinfo
from ddptui.probe.parse import parse_facts
from ddptui.remote.status import Reach, Reachability
from ddptui.run.following.events import StartEvent, StepEvent
from ddptui.run.following.model import RunModel
from ddptui.run.following.nccl_init import NcclInit
from ddptui.run.following.progress import STRAGGLER_EVENTS, RunProgress
from ddptui.run.following.state import Straggler
from ddptui.run.following.updates import FileLine, Heartbeat
from ddptui.run.record import Attempt, Incident, NodeRecord, RunRecord, RunState
from ddptui.run.supervisor.judging import STRAGGLER_WINDOW_S
from ddptui.run.supervisor.stragglers import StragglerNotes
from ddptui.run.timeline import Timeline

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CREATED = 1796077338.0
"""When the recorded run started: every time shown is relative to the recordings."""


def health_report() -> CheckReport:
    """gpu-a: the idle H200; gpu-b: the H200 with a GPU held by pid 529 and an older torch (an
    odd parity value); gpu-c: timed out."""
    idle = parse_facts((FIXTURES / "probe" / "h200_idle_nvml.json").read_text())
    busy = parse_facts((FIXTURES / "probe" / "h200_busy_nvml.json").read_text())
    busy = dataclasses.replace(busy, torch=dataclasses.replace(busy.torch, version="2.10.0+cu130"))
    hosts = (
        HostConfig("gpu-a", "192.0.2.2"),
        HostConfig("gpu-b", "192.0.2.3"),
        HostConfig("gpu-c", "192.0.2.4"),
    )
    config = Config(Path("hosts.toml"), ClusterConfig(), hosts, JobConfig())
    checks = [
        HostCheck(hosts[0], Reachability(Reach.OK), idle, 0.0, None),
        HostCheck(hosts[1], Reachability(Reach.OK), busy, 0.2, True),
        HostCheck(
            hosts[2],
            Reachability(Reach.TIMEOUT, "192.0.2.4:22: no answer within 10 s"),
        ),
    ]
    return CheckReport(config, tuple(checks), tuple(evaluate(config, checks)), 3.4, PortTest(True))


SINFO = """\
gpu-001|h200*|idle|gpu:h200:8(S:0-1)|none
gpu-002|h200*|mixed|gpu:h200:8(S:0-1)|none
gpu-003|h200*|drained|gpu:h200:8(S:0-1)|Xid 79 GPU fell off the bus
gpu-004|h200*|down*|gpu:h200:8(S:0-1)|Not responding
gpu-005|h200*|allocated|gpu:h200:8(S:0-1)|none
gpu-006|h200*|idle|gpu:h200:8(S:0-1)|none
"""
"""A partition of six H200 nodes as ``sinfo -h -N -o "%N|%P|%T|%G|%E"`` lists them: one
drained by its administrator, one not responding, one kept off by ``exclude``."""


def slurm_health() -> tuple[Config, SlurmCheck]:
    """A ``[slurm]`` cluster asking for 3 nodes of :data:`SINFO`'s partition, gpu-006 excluded."""
    slurm = SlurmConfig(nodes=3, partition="h200", exclude=("gpu-006",))
    node = HostConfig("node", "")
    config = Config(Path("slurm.toml"), ClusterConfig(), (), JobConfig(), slurm, node)
    return config, evaluate_slurm(slurm, parse_sinfo(SINFO), {"gpu-006"})


def run_record(state: RunState = RunState.RUNNING) -> RunRecord:
    record = RunRecord(
        id="20261130-222218-h200",
        created=CREATED,
        hosts_file="hosts.toml",
        entry="trainer",
        backend="nccl",
        master_addr="192.0.2.2",
        world_size=4,
        args=["--precision", "bf16"],
        nodes=[
            NodeRecord("gpu-a", "192.0.2.2", 0, 2, "/srv/ddptui-runs/r", [], {}),
            NodeRecord("gpu-b", "192.0.2.3", 1, 2, "/srv/ddptui-runs/r", [], {}),
        ],
    )
    record.transition(RunState.STAGING, now=CREATED)
    if state is RunState.STAGING:
        return record
    # The launch as far as ddptui saw it; the ranks' stages come from their recorded events.
    record.timelines = [Timeline(1, CREATED - 14.0)]
    for host, stamps in {
        "gpu-a": {"connected": 0.3, "probed": 2.1, "checked": 2.6, "staged": 3.9, "started": 4.2},
        "gpu-b": {"connected": 0.4, "probed": 1.8, "checked": 2.6, "staged": 3.7, "started": 4.1},
    }.items():
        for stage, at in stamps.items():
            record.timelines[0].stamp(host, stage, CREATED - 14.0 + at)
    # What NCCL said of its communicator's start (NCCL_DEBUG=INFO).
    bootstrap = NcclInit(3, 1.42, (("kernels", 0.02), ("bootstrap", 1.1), ("connections", 0.3)))
    record.timelines[0].note_nccl("gpu-b", bootstrap)
    record.attempts.append(Attempt(1, CREATED, 29500))
    record.transition(RunState.STARTING, now=CREATED)
    if state is not RunState.STARTING:
        record.transition(RunState.RUNNING, now=CREATED)
    if state not in (RunState.STARTING, RunState.RUNNING):
        record.transition(state, now=CREATED)
    return record


def _as_rank(line: str, rank: int, scale: float) -> str:
    event = json.loads(line)
    event.update(rank=rank, local_rank=rank % 2, node_rank=rank // 2, world_size=4)
    if isinstance(event.get("loss"), float):
        event["loss"] *= scale
    return json.dumps(event)


def run_model(*, failed: bool = True, steps: int = 300, state: RunState | None = None) -> RunModel:
    """Four ranks replaying the recorded bf16 run (each a little off the others); with
    ``failed``, rank 0 stops at step 120 with the recorded NCCL error and its logs (whose
    lines name rank 0). The record says ``state`` (default: failed or running, as the run)."""
    record = run_record(state or (RunState.FAILED if failed else RunState.RUNNING))
    model = RunModel(record)
    events = (FIXTURES / "events" / "bf16-300-steps.rank0.jsonl").read_text().splitlines()
    for rank in range(4):
        host = record.nodes[rank // 2].host
        path = f"events/rank{rank}.jsonl"
        for line in events:
            step = json.loads(line).get("step")
            if isinstance(step, int) and (step > steps or (failed and rank == 0 and step > 120)):
                continue
            model.apply(FileLine(host, path, 0, _as_rank(line, rank, 1 + 0.03 * rank)))
    if failed:
        nccl = FIXTURES / "nccl"
        logs = "logs/attempt-1/r_x/0/{}.log"
        for name in ("stdout", "stderr"):
            for text in (nccl / f"bad-socket-ifname.{name}.txt").read_text().splitlines():
                model.apply(FileLine("gpu-a", logs.format(name), 0, text))
        error = (FIXTURES / "events" / "nccl-error.rank0.jsonl").read_text().splitlines()[0]
        model.apply(FileLine("gpu-a", "events/rank0.jsonl", 0, _as_rank(error, 0, 1.0)))
    for host, used, util in (("gpu-a", 21007, 97), ("gpu-b", 20480, 64)):
        for beat in range(20):
            gpu = {
                "index": 0,
                "utilization.gpu": (util + beat * 7) % 100,
                "memory.used": used,
                "memory.total": 143771,
                "temperature.gpu": 41,
                "power.draw": 310.5,
            }
            sample = {"procs": 3, "cpu_pct": 180.0, "rss_mib": 2900.0, "gpus": [gpu]}
            model.apply(Heartbeat(host, CREATED + beat, {1: True}, sample))
    return model


def cluster_model(nodes: int = 128, per_node: int = 8, steps: int = 80) -> RunModel:
    """A large cluster (1,024 ranks) replaying the recorded bf16 run, every other step, each
    rank's loss a little above the last's: rank 42 (node 5) fails with the recorded NCCL error
    at step 60, and rank 613's loss is no number from step 50. Every node has 8 busy H200s,
    but node 5's GPU 2, idle."""
    record = run_record()
    record.world_size = nodes * per_node
    record.nodes = [
        NodeRecord(f"gpu-{node:03d}", f"10.1.{node}.2", node, per_node, "/srv/r", [], {})
        for node in range(nodes)
    ]
    model = RunModel(record)
    lines = (FIXTURES / "events" / "bf16-300-steps.rank0.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    error = json.loads((FIXTURES / "events" / "nccl-error.rank0.jsonl").read_text().splitlines()[0])
    # Step by step across the ranks, as they arrive.
    for event in events:
        step = event.get("step")
        if isinstance(step, int) and (step > steps or step % 2):
            continue
        for rank in range(record.world_size):
            if rank == 42 and isinstance(step, int) and step > 60:
                continue
            shown = {**event, **_ids(rank, per_node, record.world_size)}
            if isinstance(shown.get("loss"), float):
                shown["loss"] *= 1 + 0.0002 * rank
                if rank == 613 and isinstance(step, int) and step >= 50:
                    shown["loss"] = None
            host = record.nodes[rank // per_node].host
            model.apply(FileLine(host, f"events/rank{rank}.jsonl", 0, json.dumps(shown)))
    # Five heartbeats a node, 8 H200s each busy but for node 5's, whose rank 42 failed.
    for node in record.nodes:
        for beat in range(5):
            gpus = [
                {
                    "index": index,
                    "utilization.gpu": 0 if node.node_rank == 5 and index == 2 else 90 + beat,
                    "memory.used": 61440 + 512 * index,
                    "memory.total": 143771,
                    "temperature.gpu": 44,
                    "power.draw": 612.4,
                }
                for index in range(per_node)
            ]
            sample = {"procs": per_node + 1, "cpu_pct": 780.0, "rss_mib": 23200.0, "gpus": gpus}
            model.apply(Heartbeat(node.host, CREATED + 2 * beat, {1: True}, sample))
    failed = {**error, **_ids(42, per_node, record.world_size)}
    model.apply(
        FileLine(record.nodes[42 // per_node].host, "events/rank42.jsonl", 0, json.dumps(failed))
    )
    return model


def _ids(rank: int, per_node: int, world_size: int) -> dict[str, int]:
    node = rank // per_node
    return {
        "rank": rank,
        "local_rank": rank % per_node,
        "node_rank": node,
        "world_size": world_size,
    }


STRAGGLING_HOSTS = ["gpu-a", "gpu-a", "gpu-b", "gpu-b"]


def straggling_run() -> tuple[RunProgress, tuple[Straggler, ...]]:
    """Four ranks on two nodes, rank 3 (node 1) doing 45% more work a step than the rest for
    longer than the straggler window, and the stragglers the supervisor's judging named after
    each round of their events: not set by hand, so the table is tested on what a run would
    really hand it."""
    run, judge = RunProgress(), StragglerNotes()
    ids: list[dict[str, Any]] = [
        {"rank": rank, "local_rank": rank % 2, "node_rank": rank // 2, "world_size": 4}
        for rank in range(len(STRAGGLING_HOSTS))
    ]
    for host, rank_ids in zip(STRAGGLING_HOSTS, ids, strict=True):
        run.apply(host, StartEvent(**rank_ids, time=0.0, total_steps=400, start_step=0))
    for n in range(1, STRAGGLER_EVENTS + 2 * int(STRAGGLER_WINDOW_S)):
        for host, rank_ids in zip(STRAGGLING_HOSTS, ids, strict=True):
            own = 0.145 if rank_ids["rank"] == 3 else 0.10
            step = StepEvent(
                **rank_ids, time=float(n), step=n, loss=1.0, step_time_s=0.2, compute_s=own
            )
            run.apply(host, step)
        judge.changes(1, run)
    named = judge.named(1)
    assert [s.rank for s in named] == [3]
    return run, named


def healed_incident(detected_at: float) -> Incident:
    """A failure recovery healed, every field known: rank 3 on gpu-b killed, gpu-b set aside and
    the run resumed on gpu-e from step 100's checkpoint."""
    return Incident(
        number=1,
        attempt=1,
        detected_at=detected_at,
        cause="rank 3 on gpu-b was killed by SIGKILL",
        blamed=("gpu-b",),
        why="its kernel's OOM killer named rank 3",
        fault_at=detected_at - 2.0,
        action="resumed on gpu-e in place of gpu-b",
        resumed_attempt=2,
        last_step=140,
        checkpoint_step=100,
        first_step_at=detected_at + 30.0,
        notified="ok",
        last_step_at=detected_at - 5.0,
        step_s=0.5,
    )
