"""``ddptui dump``'s I/O: every rank's Python stacks from every host at once, kept on the head.

Each host's node agent answers for its ranks (:func:`ddptui.run.agent_client.dump`); what they
sent is saved as it came, one file per rank.
"""

from __future__ import annotations

import asyncio
import pickle
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from ddptui.aio import wait_for
from ddptui.config.model import Config
from ddptui.remote.transport import Transport
from ddptui.run import agent_client as nodes
from ddptui.run.flight import FlightDumpError, FlightFinding, analyse, load_dump, read_dump
from ddptui.run.layout import FLIGHT_NAME
from ddptui.run.stacks import RankStack, StackGroup, group
from ddptui.run.store import RunRecord
from ddptui.run.transports import transport_for
from ddptui.untrusted import plain

TORCH_ANALYSIS_FILE = "torch-fr-trace.txt"
TORCH_ANALYSER_S = 60.0
MAX_ANALYSIS_BYTES = 1 << 20


@dataclass(frozen=True)
class TorchAnalysis:
    ok: bool
    output: str
    """Its output, or why it stopped (its last line)."""


@dataclass(frozen=True)
class StackDump:
    run_id: str
    taken_at: float
    stacks: tuple[RankStack, ...]
    """Every rank a host reported, with its stack or why there is none."""
    unanswered: tuple[str, ...] = ()
    """``host: why`` for each host that gave no answer."""
    attempts: tuple[int, ...] = ()
    """The attempts the hosts' ranks belong to (one, unless a host lags behind a restart)."""
    saved_in: Path | None = None
    flight: tuple[FlightFinding, ...] = ()
    """What the ranks' flight recorders say, where any was dumped."""
    flight_dumps: Mapping[int, bytes] = field(default_factory=dict)
    """Global rank → its flight-recorder dump as the host holds it (saved beside the stacks)."""
    flight_errors: tuple[str, ...] = ()
    torch_analysis: TorchAnalysis | None = None
    """What torch's own analyser said of the flight-recorder dumps, where the head has torch."""

    @property
    def groups(self) -> list[StackGroup]:
        return group(self.stacks)

    @property
    def stackless(self) -> list[RankStack]:
        return sorted((stack for stack in self.stacks if not stack.threads), key=_by_rank)

    def document(self) -> dict[str, Any]:
        """``ddptui dump --json``, and the stacks in a hang's evidence."""
        return {
            "run": self.run_id,
            "time": self.taken_at,
            "saved_in": None if self.saved_in is None else str(self.saved_in),
            "groups": [
                {
                    "ranks": [stack.rank for stack in group.ranks],
                    "hosts": sorted({stack.host for stack in group.ranks}),
                    "frames": [
                        {"function": frame.function, "file": frame.file, "line": frame.line}
                        for frame in group.frames
                    ],
                }
                for group in self.groups
            ],
            "without_stack": [
                {"rank": stack.rank, "host": stack.host, "pid": stack.pid, "why": stack.error}
                for stack in self.stackless
            ],
            "unanswered": list(self.unanswered),
            "flight_recorder": [
                {"group": finding.group, "ranks": list(finding.odd_ranks), "text": finding.text}
                for finding in self.flight
            ],
            "flight_recorder_errors": list(self.flight_errors),
        }


def _by_rank(stack: RankStack) -> int:
    return stack.rank


async def take(config: Config, record: RunRecord, remote: Transport | None = None) -> StackDump:
    """Ask every node of the run for its ranks' stacks, in parallel (through ``remote``'s
    connections where given: the supervisor's)."""
    if remote is None:
        own = await transport_for(config, record)
        try:
            return await take(config, record, own)
        finally:
            await own.close()
    taken_at = time.time()
    attempts = max(1, len(record.attempts))
    stacks: list[RankStack] = []
    unanswered: list[str] = []
    seen: set[int] = set()
    dumps: dict[int, bytes] = {}
    errors: list[str] = []

    async def one(name: str, node_rank: int, run_dir: str) -> None:
        host = config.host(name)
        try:
            answer = await nodes.dump(remote, host, node_rank, run_dir, attempts=attempts)
        except nodes.NodeError as error:
            unanswered.append(nodes.described(name, error))
            return
        if answer.stacks:
            seen.add(answer.attempt)
        stacks.extend(answer.stacks)
        for rank in answer.flight:
            try:
                dumps[rank] = await nodes.read_flight(remote, host, run_dir, rank)
            except nodes.NodeError as error:
                errors.append(f"rank {rank}: {error}")

    await asyncio.gather(*(one(node.host, node.node_rank, node.run_dir) for node in record.nodes))
    findings, traces = [], []
    for rank, data in sorted(dumps.items()):
        try:
            traces.append(read_dump(rank, data))
        except FlightDumpError as error:
            errors.append(f"rank {rank}'s flight-recorder dump: {error}")
    if traces:
        findings = analyse(traces, record.world_size)
    torch_analysis = await analyse_with_torch(dumps) if traces else None
    return StackDump(
        record.id,
        taken_at,
        tuple(sorted(stacks, key=_by_rank)),
        tuple(sorted(unanswered)),
        tuple(sorted(seen)),
        flight=tuple(findings),
        flight_dumps=dumps,
        flight_errors=tuple(errors),
        torch_analysis=torch_analysis,
    )


async def analyse_with_torch(dumps: Mapping[int, bytes]) -> TorchAnalysis | None:
    """torch's flight-recorder analyser (``fr_trace``) on the dumps, where this machine has
    torch: on fresh copies of what :func:`~ddptui.run.flight.load_dump` read, since it unpickles
    whatever it is given, and a host's pickle could name code to run here."""
    if find_spec("torch") is None:
        return None
    with tempfile.TemporaryDirectory(prefix="ddptui-fr-") as work:
        for rank, data in dumps.items():
            try:
                copy = pickle.dumps(load_dump(data), protocol=2)
            except (FlightDumpError, RecursionError):
                continue
            (Path(work) / f"{FLIGHT_NAME}{rank}").write_bytes(copy)
        argv = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", work]
        process = await asyncio.create_subprocess_exec(
            *argv,
            "-p",
            FLIGHT_NAME,
            # A rank that left no dump is the usual suspect, not a reason to say nothing.
            "--allow-incomplete-ranks",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            out, _ = await wait_for(process.communicate(), TORCH_ANALYSER_S)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()
            return TorchAnalysis(False, f"did not finish in {TORCH_ANALYSER_S:g} s")
    text = plain(out[:MAX_ANALYSIS_BYTES].decode("utf-8", "replace"))
    lines = [line for line in text.splitlines() if line.strip() and "tabulate" not in line]
    if process.returncode != 0:
        return TorchAnalysis(False, lines[-1] if lines else f"exit status {process.returncode}")
    return TorchAnalysis(True, "\n".join(lines))


def save(dump: StackDump, directory: Path) -> StackDump:
    """Each rank's text as its host sent it, under ``directory``/<time>/."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(dump.taken_at))
    target = directory / stamp
    suffix = 1
    while target.exists():
        suffix += 1
        target = directory / f"{stamp}-{suffix}"
    target.mkdir(parents=True)
    for stack in dump.stacks:
        name = f"node{stack.node_rank}-rank{stack.rank}.txt"
        (target / name).write_text(stack.text or f"(no stack: {stack.error})\n")
    for rank, data in dump.flight_dumps.items():
        (target / f"{FLIGHT_NAME}{rank}").write_bytes(data)
    if dump.torch_analysis is not None:
        (target / TORCH_ANALYSIS_FILE).write_text(dump.torch_analysis.output + "\n")
    return replace(dump, saved_in=target)
