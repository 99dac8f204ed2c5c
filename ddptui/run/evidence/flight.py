"""torch's flight recorder, read: which collective each rank entered last, and which ranks
never entered the one the others wait in (or entered a different one).

Pure. A dump comes from a host, so it is untrusted: torch writes it as a pickle (the NCCL
watchdog's dump on timeout, ``_dump_fr_trace``) or as JSON (``_dump_fr_trace_json``). The pickle
is read by :mod:`ddptui.run.evidence.flight_pickle` (plain containers, a budget of values, never
:mod:`pickle`), the JSON within the same budget, and then only the fields below are taken, each
of its type and within its bounds (:func:`read_dump`): no walk over the rest, which shared
references could make endless, and nothing of it reaches another tool. torch's own analyser
(``fr_trace``) ``eval``s a field of the dump, so it never sees one.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddptui.run.evidence import flight_pickle
from ddptui.run.evidence.stacks import rank_spans
from ddptui.untrusted import count, plain

MAX_DUMP_BYTES = 32 * 1024 * 1024
"""A recorder of 2,000 entries with stacks is a few MiB."""
MAX_ENTRIES = 20_000
MAX_FRAMES = 64
"""Frames looked through for the user's call, innermost first."""
MAX_SIZES = 8
"""Tensors of a collective, and dimensions of each, that its description shows."""
MAX_TEXT = 200
MAX_SEQ = 2**53
MAX_SIZE = 2**62


class FlightDumpError(ValueError):
    """Why a dump cannot be read (said as it is, next to the rank)."""


@dataclass(frozen=True)
class Collective:
    group: str
    """The process group, as ``name (description)``."""
    seq: int
    op: str
    sizes: str
    where: str
    """The innermost frame outside torch that called it, ``function at file:line``."""
    completed: bool = False
    """NCCL's recorder marks a collective completed; gloo's leaves every one ``scheduled``."""

    @property
    def shape(self) -> tuple[str, str]:
        """What the ranks must agree on at one sequence number."""
        return self.op, self.sizes

    def describe(self) -> str:
        called = f", called from {self.where}" if self.where else ""
        return f"#{self.seq} ({self.op} {self.sizes}{called})"


@dataclass(frozen=True)
class RankTrace:
    rank: int
    collectives: tuple[Collective, ...]

    def in_group(self, group: str) -> dict[int, Collective]:
        return {c.seq: c for c in self.collectives if c.group == group}


@dataclass(frozen=True)
class FlightFinding:
    group: str
    text: str
    odd_ranks: tuple[int, ...] = ()


def read_dump(rank: int, data: bytes) -> RankTrace:
    """One rank's dump (pickle or JSON); :class:`FlightDumpError` when it is neither."""
    document = _document(data)
    entries = document.get("entries")
    if entries is None and "version" in document:
        # torch leaves the list out when it has nothing to list (only active ones asked for).
        raise FlightDumpError("it holds no collectives: none in flight, or none recorded")
    if not isinstance(entries, list):
        raise FlightDumpError("no entries in the dump")
    collectives = [c for entry in entries[:MAX_ENTRIES] if (c := _collective(entry)) is not None]
    return RankTrace(rank, tuple(collectives))


def _document(data: bytes) -> dict[Any, Any]:
    if len(data) > MAX_DUMP_BYTES:
        raise FlightDumpError(f"over {MAX_DUMP_BYTES // 2**20} MiB")
    try:
        if data.lstrip()[:1] == b"{":
            # Every container or item JSON builds costs at least one of these bytes.
            if sum(data.count(mark) for mark in (b"[", b"{", b",")) > flight_pickle.MAX_ITEMS:
                raise FlightDumpError(f"more than {flight_pickle.MAX_ITEMS:,} values")
            document = json.loads(data)
        else:
            document = flight_pickle.load(data)
    except flight_pickle.PickleRefused as error:
        raise FlightDumpError(f"not a flight-recorder dump ({error})") from None
    except (ValueError, RecursionError, MemoryError) as error:
        # ValueError covers JSON's errors and its integers of more than 4,300 digits.
        raise FlightDumpError(f"not a flight-recorder dump ({type(error).__name__})") from None
    if not isinstance(document, dict):
        raise FlightDumpError("no entries in the dump")
    return document


def _collective(entry: Any) -> Collective | None:
    if not isinstance(entry, dict) or entry.get("is_p2p") is True:
        return None
    seq = count(entry.get("collective_seq_id"), MAX_SEQ)
    op = entry.get("profiling_name")
    if seq is None or not isinstance(op, str):
        return None
    return Collective(
        _group(entry.get("process_group")),
        seq,
        plain(op, limit=MAX_TEXT, one_line=True),
        _sizes(entry.get("input_sizes")),
        _caller(entry.get("frames")),
        entry.get("state") == "completed",
    )


def _group(value: Any) -> str:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return "?"
    if not all(isinstance(part, str) for part in value):
        return "?"
    name, description = (plain(part, limit=MAX_TEXT, one_line=True) for part in value)
    return f"{name} ({description})" if description else name


def _sizes(value: Any) -> str:
    """``[[1024],[16,16]]``: each tensor's dimensions, as torch lists them."""
    if not isinstance(value, list):
        return "?"
    shown = []
    for shape in value[:MAX_SIZES]:
        if not isinstance(shape, list):
            return "?"
        dims = [count(dim, MAX_SIZE) for dim in shape[:MAX_SIZES]]
        if any(dim is None for dim in dims):
            return "?"
        shown.append("[" + ",".join(str(dim) for dim in dims) + "]")
    return plain("[" + ",".join(shown) + "]", limit=MAX_TEXT)


def _caller(frames: Any) -> str:
    if not isinstance(frames, list):
        return ""
    for frame in frames[:MAX_FRAMES]:
        if not isinstance(frame, dict):
            continue
        filename, name = frame.get("filename"), frame.get("name")
        line = count(frame.get("line"), MAX_SEQ)
        if not isinstance(filename, str) or not isinstance(name, str) or line is None:
            continue
        if "/torch/" in filename:
            continue
        where = f"{posixpath.basename(filename[-4096:])}:{line}"
        return plain(f"{name[:MAX_TEXT]} at {where}", limit=MAX_TEXT, one_line=True)
    return ""


def analyse(traces: Iterable[RankTrace], world_size: int | None = None) -> list[FlightFinding]:
    """Per process group: the ranks that stopped short of the collective the others entered,
    and the collectives the ranks entered differently. Ranks without a dump are named."""
    by_rank = {trace.rank: trace for trace in traces}
    findings: list[FlightFinding] = []
    missing = [] if world_size is None else [r for r in range(world_size) if r not in by_rank]
    if missing:
        findings.append(
            FlightFinding(
                "",
                f"no flight-recorder dump from {_ranks(missing)}: a rank that was stopped, "
                "killed or never reached its dump; look there first",
                tuple(missing),
            )
        )
    groups = dict.fromkeys(c.group for trace in by_rank.values() for c in trace.collectives)
    for group in groups:
        seen = {rank: trace.in_group(group) for rank, trace in by_rank.items()}
        findings += _group_findings(group, seen, complete=not missing)
    return findings


def _group_findings(
    group: str, seen: Mapping[int, Mapping[int, Collective]], *, complete: bool
) -> list[FlightFinding]:
    last = {rank: max(entered, default=0) for rank, entered in seen.items()}
    top = max(last.values(), default=0)
    ahead = sorted(rank for rank, seq in last.items() if seq == top)
    found: list[FlightFinding] = []
    mismatch = _first_mismatch(seen)
    if mismatch is not None:
        found.append(mismatch)
    behind = sorted((rank for rank in last if last[rank] < top), key=lambda r: (last[r], r))
    if not behind:
        if mismatch is None and top:
            found.append(FlightFinding(group, _level(group, seen, ahead, top, complete)))
        return found
    target = seen[ahead[0]][top]
    for seq in sorted({last[rank] for rank in behind}):
        ranks = [rank for rank in behind if last[rank] == seq]
        was = seen[ranks[0]].get(seq)
        before = f"its last was {was.describe()}" if was else "it entered none"
        label = "rank" if len(ranks) == 1 else "ranks"
        found.append(
            FlightFinding(
                group,
                f"group {group}: {label} {rank_spans(ranks)} never entered {target.describe()}, "
                f"which {_ranks(ahead)} wait in; {before}",
                tuple(ranks),
            )
        )
    return found


def _level(
    group: str,
    seen: Mapping[int, Mapping[int, Collective]],
    ranks: Sequence[int],
    top: int,
    complete: bool,
) -> str:
    """What the ranks that all reached collective ``top`` of ``group`` tell."""
    sample = seen[ranks[0]][top]
    if all(seen[rank][top].completed for rank in ranks):
        if not complete:
            return f"group {group}: {_ranks(ranks)} completed {sample.describe()}"
        return (
            f"group {group}: every rank completed {sample.describe()}, its last collective; "
            "none waits in this group, so what holds them is outside it (another group, the "
            "data, the host)"
        )
    if not complete:
        return f"group {group}: {_ranks(ranks)} entered {sample.describe()}"
    return (
        f"group {group}: every rank entered {sample.describe()}; none is behind in the "
        "recorder, so the collective itself did not complete (the network, or a rank that "
        "died inside it)"
    )


def _first_mismatch(seen: Mapping[int, Mapping[int, Collective]]) -> FlightFinding | None:
    common = set.intersection(*(set(entered) for entered in seen.values())) if seen else set()
    for seq in sorted(common):
        shapes: dict[tuple[str, str], list[int]] = {}
        for rank, entered in sorted(seen.items()):
            shapes.setdefault(entered[seq].shape, []).append(rank)
        if len(shapes) > 1:
            parts = sorted(shapes.items(), key=lambda item: (len(item[1]), item[1][0]))
            said = "; ".join(f"{_ranks(ranks)}: {op} {sizes}" for (op, sizes), ranks in parts)
            group = next(iter(seen.values()))[seq].group
            odd = tuple(rank for _, ranks in parts[:-1] for rank in ranks)
            return FlightFinding(
                group, f"group {group}: the ranks disagree on collective #{seq}: {said}", odd
            )
    return None


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + rank_spans(ranks)
