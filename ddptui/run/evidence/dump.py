"""``ddptui dump``'s I/O: every rank's Python stacks from every host at once, kept on the head.

Each host's node agent answers for its ranks (:func:`ddptui.run.agent.client.dump`). A host is
heard for its own ranks only (any other it names is set aside, said), within a budget of flight
recorder bytes, and whatever goes wrong with one host's answer is that host's evidence lost,
never the others'. Flight-recorder dumps are read by :mod:`ddptui.run.evidence.flight` alone:
torch's analyser evaluates fields of a dump, so no dump from a host reaches it.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ddptui.atomic import make_dirs, write_new
from ddptui.config.model import Config
from ddptui.errors import DdptuiError
from ddptui.remote.transport import Transport
from ddptui.run.agent import client as nodes
from ddptui.run.agent.call import NodeError, described
from ddptui.run.evidence.flight import FlightDumpError, FlightFinding, RankTrace, analyse, read_dump
from ddptui.run.evidence.stacks import RankStack, StackGroup, group, parse_stacks
from ddptui.run.record import NodeRecord, RunRecord

HOST_FLIGHT_BYTES = 64 * 1024 * 1024
"""Flight-recorder bytes read from one host per dump: 8 ranks' recorders of 2,000 collectives
with their stacks are about 24 MiB."""
FLIGHT_BYTES = 512 * 1024 * 1024
"""From all hosts together, per dump."""
_RANK_FIELDS = ("host", "node_rank", "rank", "pid", "via", "error", "note")
STACKS_INDEX = "stacks.json"
"""What ddptui read of a dump it kept: each rank's host, pid and how its stack came (or why
none), where its text lies in its node's file, the hosts that gave no answer, what the flight
recorders say."""
FLIGHT_READING = "flight-recorder.json"
"""What ddptui read of the dumps, saved beside them: the collectives, as plain JSON."""
HOST_BYTES_SUFFIX = ".from-host"
"""The name's end of a dump saved as its host sent it: not torch's ``flight_<rank>``, so
torch's analyser (which unpickles, then evaluates fields) is not pointed at it by habit."""


class DumpUnreadable(DdptuiError):
    """A kept dump that is not as :func:`save` left it."""


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
    """Global rank → its flight-recorder dump as the host sent it (saved beside the stacks)."""
    flight_traces: tuple[RankTrace, ...] = ()
    """What :mod:`~ddptui.run.evidence.flight` read of each dump."""
    flight_errors: tuple[str, ...] = ()

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


async def take(
    config: Config, record: RunRecord, remote: Transport, skip: Collection[str] = ()
) -> StackDump:
    """Ask every node of the run for its ranks' stacks, in parallel, through ``remote``'s
    connections (the supervisor's, or the run's kind's: :meth:`Kind.reaching
    <ddptui.run.backends.kind.Kind.reaching>`). The hosts in ``skip`` (known not to answer)
    are not asked: each would cost a connect timeout, and say nothing."""
    taken_at = time.time()
    budget = _Budget(FLIGHT_BYTES)
    heard = await asyncio.gather(
        *(
            _hear(config, record, remote, node, budget)
            if node.host not in skip
            else _not_asked(node.host)
            for node in record.nodes
        )
    )
    stacks = [stack for host in heard for stack in host.stacks]
    dumps = {rank: data for host in heard for rank, data in host.flight.items()}
    errors = [error for host in heard for error in host.errors]
    traces: list[RankTrace] = []
    for rank, data in sorted(dumps.items()):
        try:
            traces.append(await asyncio.to_thread(read_dump, rank, data))
        except FlightDumpError as error:
            errors.append(f"rank {rank}'s flight-recorder dump: {error}")
    return StackDump(
        record.id,
        taken_at,
        tuple(sorted(stacks, key=_by_rank)),
        tuple(sorted(host.unanswered for host in heard if host.unanswered)),
        tuple(sorted({host.attempt for host in heard if host.stacks and host.attempt})),
        flight=tuple(analyse(traces, record.world_size) if traces else ()),
        flight_dumps=dumps,
        flight_traces=tuple(traces),
        flight_errors=tuple(errors),
    )


@dataclass
class _Budget:
    left: int


@dataclass
class _Heard:
    """One host's part of a dump."""

    stacks: list[RankStack] = field(default_factory=list)
    attempt: int = 0
    flight: dict[int, bytes] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    unanswered: str = ""


async def _hear(
    config: Config, record: RunRecord, remote: Transport, node: NodeRecord, budget: _Budget
) -> _Heard:
    heard = _Heard()
    try:
        await _ask(config, record, remote, node, budget, heard)
    except Exception as error:  # one host's answer, whatever it does, costs that host's alone
        heard.unanswered = described(node.host, error)
    return heard


async def _not_asked(host: str) -> _Heard:
    return _Heard(unanswered=f"{host}: not asked, as it did not answer when the attempt ended")


async def _ask(
    config: Config,
    record: RunRecord,
    remote: Transport,
    node: NodeRecord,
    budget: _Budget,
    heard: _Heard,
) -> None:
    host = config.host(node.host)
    answer = await nodes.dump(
        remote, host, node.node_rank, node.run_dir, attempts=max(1, len(record.attempts))
    )
    own = record.ranks_of(node)
    strays = sorted(
        {stack.rank for stack in answer.stacks if stack.rank not in own}
        | {rank for rank in answer.flight if rank not in own}
    )
    if strays:
        heard.errors.append(
            f"{node.host} answered for ranks {_listed(strays)}, which are not its own "
            f"({_listed(list(own))}): set aside"
        )
    firsts = {stack.rank: stack for stack in reversed(answer.stacks) if stack.rank in own}
    heard.stacks, heard.attempt = list(firsts.values()), answer.attempt
    host_left = HOST_FLIGHT_BYTES
    for rank in sorted(rank for rank in answer.flight if rank in own):
        room = min(host_left, budget.left)
        if room <= 0:
            heard.errors.append(
                f"rank {rank}'s flight-recorder dump on {node.host}: not read, past the "
                f"{HOST_FLIGHT_BYTES // 2**20} MiB read of a host (or "
                f"{FLIGHT_BYTES // 2**20} MiB of all) for one dump"
            )
            continue
        try:
            data = await nodes.read_flight(remote, host, node.run_dir, rank, max_bytes=room)
        except NodeError as error:
            heard.errors.append(f"rank {rank}: {error}")
            continue
        host_left -= len(data)
        budget.left -= len(data)
        heard.flight[rank] = data


def _listed(ranks: list[int]) -> str:
    shown = ", ".join(str(rank) for rank in ranks[:8])
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def save(dump: StackDump, directory: Path) -> StackDump:
    """The dump under ``directory``/<time>/: each node's ranks' texts as its host sent them,
    one file a node (``node<N>.txt``, each rank under a heading: a file a rank would cost
    seconds at thousands of ranks on a slow home directory), what ddptui read of them
    (:data:`STACKS_INDEX`, for :func:`load`); each flight recorder as its host sent it
    (``rank<R>.from-host``, never to be unpickled) and as ddptui read it
    (:data:`FLIGHT_READING`)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(dump.taken_at))
    target = directory / stamp
    suffix = 1
    while target.exists():
        suffix += 1
        target = directory / f"{stamp}-{suffix}"
    make_dirs(target, exist_ok=False)
    ranks: list[dict[str, Any]] = []
    by_node: dict[int, list[RankStack]] = {}
    for stack in dump.stacks:
        by_node.setdefault(stack.node_rank, []).append(stack)
    for node_rank, stacks in sorted(by_node.items()):
        name = f"node{node_rank}.txt"
        content = bytearray()
        for stack in stacks:
            content += _heading(stack).encode()
            text = stack.text.encode("utf-8", errors="replace")
            where = {"file": name, "at": len(content), "size": len(text)}
            ranks.append({**{key: getattr(stack, key) for key in _RANK_FIELDS}, **where})
            content += text if not text or text.endswith(b"\n") else text + b"\n"
        write_new(target / name, bytes(content))
    index = {
        "run": dump.run_id,
        "taken_at": dump.taken_at,
        "ranks": ranks,
        "unanswered": list(dump.unanswered),
        "attempts": list(dump.attempts),
        "flight": [
            {"group": finding.group, "text": finding.text, "odd_ranks": list(finding.odd_ranks)}
            for finding in dump.flight
        ],
        "flight_errors": list(dump.flight_errors),
    }
    write_new(target / STACKS_INDEX, json.dumps(index, separators=(",", ":")))
    for rank, data in dump.flight_dumps.items():
        write_new(target / f"flight-rank{rank}{HOST_BYTES_SUFFIX}", data)
    if dump.flight_traces:
        reading = [
            {
                "rank": trace.rank,
                "collectives": [
                    {
                        "group": c.group,
                        "seq": c.seq,
                        "op": c.op,
                        "sizes": c.sizes,
                        "called_from": c.where,
                    }
                    for c in trace.collectives
                ],
            }
            for trace in dump.flight_traces
        ]
        write_new(target / FLIGHT_READING, json.dumps(reading, indent=1) + "\n")
    return replace(dump, saved_in=target)


def _heading(stack: RankStack) -> str:
    how = f"via {stack.via}" if stack.text else f"no stack: {stack.error}"
    return f"=== rank {stack.rank} (pid {stack.pid}) {how} ===\n"


def load(directory: Path) -> StackDump:
    """The dump :func:`save` kept in ``directory``, as it shows (each rank's threads read again
    from its text); the flight recorders' own bytes stay in their files. Raises
    :class:`DumpUnreadable`."""
    try:
        index = json.loads((directory / STACKS_INDEX).read_bytes())
        files: dict[str, bytes] = {}
        stacks = []
        for rank in index["ranks"]:
            name = str(rank["file"])
            if name not in files:
                # Only a node's file of this dump: the index is ddptui's own, the folder too.
                if not (name.startswith("node") and name == posixpath.basename(name)):
                    raise ValueError(f"a rank's text is said to be in {name!r}")
                files[name] = (directory / name).read_bytes()
            at, size = int(rank["at"]), int(rank["size"])
            text = files[name][at : at + size].decode("utf-8", errors="replace")
            host, node_rank, number, pid, via, error, note = (rank[key] for key in _RANK_FIELDS)
            stacks.append(
                RankStack(
                    str(host),
                    int(node_rank),
                    int(number),
                    int(pid),
                    str(via),
                    parse_stacks(text),
                    str(error),
                    str(note),
                    text,
                )
            )
        return StackDump(
            str(index["run"]),
            float(index["taken_at"]),
            tuple(stacks),
            tuple(str(why) for why in index["unanswered"]),
            tuple(int(number) for number in index["attempts"]),
            directory,
            tuple(
                FlightFinding(str(f["group"]), str(f["text"]), tuple(map(int, f["odd_ranks"])))
                for f in index["flight"]
            ),
            flight_errors=tuple(str(error) for error in index["flight_errors"]),
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise DumpUnreadable(f"the stacks kept in {directory} cannot be read: {error}") from None
