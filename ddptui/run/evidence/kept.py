"""A stack dump as ddptui keeps it on the head: what was taken (:class:`StackDump`), kept in
the run's store (:func:`save`: each node's ranks' texts as its host sent them, and what ddptui
read of them) and read back (:func:`load`: a supervisor's dump reaches ``ddptui dump`` so).

No SSH here: taking a dump from the hosts is :mod:`ddptui.run.evidence.dump`'s, and the words
that show one (:mod:`ddptui.present.stacks`) and a dump a supervisor took need none of it.
"""

from __future__ import annotations

import json
import posixpath
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ddptui.atomic import make_dirs, write_new
from ddptui.errors import DdptuiError
from ddptui.run.evidence.flight import FlightFinding, RankTrace
from ddptui.run.evidence.stacks import RankStack, StackGroup, group, parse_stacks

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
