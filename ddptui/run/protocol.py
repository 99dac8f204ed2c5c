"""The supervisor's protocol: typed, versioned messages over its Unix socket, one JSON per line.

A viewer connects, sends :class:`Attach` (or only requests), and reads messages until the
supervisor closes. The supervisor sends :class:`Hello` first, then the journal's lines from the
position asked for (exactly the bytes the journal holds, so the viewer can count its position),
the latest heartbeat and silence of every host, its :class:`~ddptui.run.following.state.Judgement`
whenever it changes, what requests say as they go, their replies, and :class:`Ended` when an
attempt has ended and been recorded. Every message names its ``type``; :data:`VERSION` is in
``hello`` and ``attach``, and a viewer of another version is told so and hung up on.

The peer is the same user's ddptui (the socket is 0600 in a 0700 directory), yet every message
is parsed as if it were not: unknown or malformed messages come back as ``None``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddptui.run.following.sample import sample_of
from ddptui.run.following.state import Hang, Judgement, RankAtHang, Straggler
from ddptui.run.following.updates import FileLine, Heartbeat, HostBack, HostSilent
from ddptui.run.record import RunState

VERSION = 1
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""The longest line either side reads: a snapshot of thousands of ranks fits, a runaway does
not fill memory."""
BUSY = 75
"""Exit status of a supervisor that found the run supervised already (EX_TEMPFAIL): its
starter attaches to the one that holds the run."""

_DECODER = json.JSONDecoder()
OPS = ("stop", "kill", "resume", "snapshot", "dump")
"""What a viewer may ask: stop (checkpoint first), kill, resume (a new attempt), snapshot (the
run as the supervisor sees it now: the ``status --json`` document), dump (every rank's stacks,
kept in the run's store: ``data["kept"]`` names their folder under ``dumps/``)."""
MAX_BROUGHT_BACK = 4096
"""Hosts a resume may take back, at most: as many as a record sets aside."""


@dataclass(frozen=True)
class Hello:
    run: str
    pid: int
    version: int
    journal_start: int
    journal_end: int
    """The journal's end when the viewer attached: a replay up to here has seen everything."""
    judgement: Judgement
    ops: tuple[str, ...] = ()
    """What this supervisor may be asked (:data:`OPS` as its ddptui knew them): one that
    started before a newer ddptui was installed knows fewer, and never answers the others."""


@dataclass(frozen=True)
class Gap:
    """Lines from ``lost_from`` to ``lost_to`` were dropped from the head's journal (it keeps
    a bounded amount); they are still on the hosts."""

    lost_from: int
    lost_to: int


@dataclass(frozen=True)
class Judged:
    judgement: Judgement


@dataclass(frozen=True)
class Said:
    """A step of a request, for people (``asked the trainer to checkpoint…``)."""

    line: str


@dataclass(frozen=True)
class Reply:
    """The end of a request: whether it was done, and what it found (``data``)."""

    id: str
    ok: bool
    message: str
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Ended:
    """The attempt ended and its outcome is recorded (and, after a failure, the other nodes
    were stopped). ``recovering``: ``[recovery]`` decides what comes next (a resume on a spare,
    or another ``ended`` when it gives up): a viewer goes on following."""

    state: RunState
    detail: str
    attempt: int
    recovering: bool = False


@dataclass(frozen=True)
class Attach:
    """Send the journal from ``position`` (None: no lines, only what happens from now)."""

    position: int | None
    version: int = VERSION


@dataclass(frozen=True)
class Request:
    id: str
    op: str
    debug: bool = False
    began: float | None = None
    """When the asking command began (Unix seconds; a resume's launch timeline starts there)."""
    bring_back: tuple[str, ...] = ()
    """A resume's hosts to take back from those recovery set aside (``resume --with``)."""


Message = Hello | Gap | Judged | Said | Reply | Ended | FileLine | Heartbeat | HostSilent | HostBack


@contextlib.contextmanager
def socket_address(path: Path) -> Iterator[str]:
    """``path`` as a Unix socket address for the block. ``sun_path`` holds 108 bytes: a longer
    path (a deep state directory) is reached through a descriptor of its directory,
    ``/proc/self/fd/N/NAME``, closed after the block (a bind or connect needs it only then)."""
    text = str(path)
    if len(text.encode()) < 100:
        yield text
        return
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{directory}/{path.name}"
    finally:
        os.close(directory)


def encode(document: Mapping[str, Any]) -> bytes:
    # ensure_ascii: whatever a host put in a line travels as escapes, never raw bytes.
    return json.dumps(document, separators=(",", ":"), allow_nan=False).encode() + b"\n"


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ESCAPE = str.maketrans(_ESCAPES)
_UNESCAPE = re.compile(r"\\(.)")
_UNESCAPED = {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}


def _field(text: str) -> str:
    # Four scans in C are cheaper than a translation by mapping, and nearly every text needs none.
    if "\\" in text or "\n" in text or "\r" in text or "\t" in text:
        return text.translate(_ESCAPE)
    return text


def _unfield(text: str) -> str:
    if "\\" not in text:
        return text
    return _UNESCAPE.sub(lambda match: _UNESCAPED.get(match.group(1), match.group(1)), text)


def line_record(line: FileLine) -> bytes:
    """A followed line as the journal keeps it and viewers receive it: ``L``, the host, the
    path, the offset after the line, ``1`` if it was cut, and its text, tab-separated, with
    backslash, newline, carriage return and tab escaped in every field. Not JSON: there is one
    for every line a run writes, and JSON around a JSON event (escaped quotes all through)
    cost a viewer three times as much to read."""
    return (
        f"L\t{_field(line.host)}\t{_field(line.path)}\t{line.offset:d}\t{line.cut:d}\t"
        f"{_field(line.text)}\n"
    ).encode("utf-8", "surrogatepass")


def _line(raw: bytes) -> FileLine | None:
    fields = raw.rstrip(b"\n").decode("utf-8", "surrogatepass").split("\t", 5)
    if len(fields) != 6 or not fields[3].isascii() or not fields[3].isdigit():
        return None
    _, host, path, offset, cut, text = fields
    return FileLine(_unfield(host), _unfield(path), int(offset), _unfield(text), cut == "1")


def message(item: Message | Attach | Request) -> bytes:
    """The wire form of any message but a line (see :func:`line_record`)."""
    return encode(_document(item))


def _document(item: Message | Attach | Request) -> dict[str, Any]:
    if isinstance(item, Hello):
        return {
            "type": "hello",
            "v": item.version,
            "run": item.run,
            "pid": item.pid,
            "journal": [item.journal_start, item.journal_end],
            "judgement": judgement_document(item.judgement),
            "ops": list(item.ops),
        }
    if isinstance(item, Gap):
        return {"type": "gap", "from": item.lost_from, "to": item.lost_to}
    if isinstance(item, Judged):
        return {"type": "judged", "judgement": judgement_document(item.judgement)}
    if isinstance(item, Said):
        return {"type": "said", "line": item.line}
    if isinstance(item, Reply):
        return {
            "type": "reply",
            "id": item.id,
            "ok": item.ok,
            "message": item.message,
            "data": dict(item.data),
        }
    if isinstance(item, Ended):
        return {
            "type": "ended",
            "state": item.state.value,
            "detail": item.detail,
            "attempt": item.attempt,
            "recovering": item.recovering,
        }
    if isinstance(item, Heartbeat):
        return {
            "type": "beat",
            "h": item.host,
            "time": item.time,
            "groups": {str(attempt): alive for attempt, alive in item.groups.items()},
            "sample": sample_document(item.sample),
        }
    if isinstance(item, HostSilent):
        return {"type": "silent", "h": item.host, "seconds": item.seconds, "reason": item.reason}
    if isinstance(item, HostBack):
        return {"type": "back", "h": item.host}
    if isinstance(item, Attach):
        return {"type": "attach", "v": item.version, "from": item.position}
    if isinstance(item, Request):
        document: dict[str, Any] = {
            "type": "request",
            "id": item.id,
            "op": item.op,
            "debug": item.debug,
        }
        if item.bring_back:
            document["bring_back"] = list(item.bring_back)
        return document if item.began is None else {**document, "began": item.began}
    raise TypeError(f"not a message: {item!r}")


def sample_document(sample: Mapping[str, Any]) -> dict[str, Any]:
    """A heartbeat's sample as JSON has it (rank numbers as keys become strings)."""
    document = dict(sample)
    if "ranks" in document:
        document["ranks"] = {str(rank): dict(seen) for rank, seen in document["ranks"].items()}
    return document


def judgement_document(judgement: Judgement) -> dict[str, Any]:
    hang = judgement.hang
    return {
        "state": judgement.state.value,
        "attempt": judgement.attempt,
        "detail": judgement.detail,
        "notes": dict(judgement.notes),
        "progress": judgement.progress,
        "stepped": judgement.stepped,
        "doing": judgement.doing,
        "stragglers": [
            {
                "rank": straggler.rank,
                "host": straggler.host,
                "slower_by": straggler.slower_by,
                "since": straggler.since,
                "cause": straggler.cause,
            }
            for straggler in judgement.stragglers
        ],
        "hang": None
        if hang is None
        else {
            "since": hang.since,
            "window_s": hang.window_s,
            "quiet": hang.quiet,
            "step": hang.step,
            "ranks": [
                {
                    "rank": rank.rank,
                    "host": rank.host,
                    "step": rank.step,
                    "process": rank.process,
                    "cpu_pct": rank.cpu_pct,
                    "why": rank.why,
                }
                for rank in hang.ranks
            ],
        },
    }


def decode(raw: bytes) -> Message | Attach | Request | None:
    """One received line as its message; None for anything malformed or unknown."""
    if raw.startswith(b"L\t"):
        try:
            return _line(raw)
        except (UnicodeDecodeError, ValueError):
            return None
    try:
        # What json.loads does with bytes, without guessing their encoding each time.
        document = _DECODER.decode(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict):
        return None
    try:
        return _decode(document)
    except (KeyError, TypeError, ValueError):
        return None


def _decode(doc: dict[str, Any]) -> Message | Attach | Request | None:
    kind = doc.get("type")
    if kind == "beat":
        groups = doc.get("groups")
        return Heartbeat(
            _text(doc["h"]),
            _number(doc["time"]),
            {
                int(attempt): alive is True
                for attempt, alive in (groups.items() if isinstance(groups, dict) else ())
                if isinstance(attempt, str) and attempt.isascii() and attempt.isdigit()
            },
            sample_of(doc.get("sample")),
        )
    if kind == "silent":
        return HostSilent(_text(doc["h"]), _number(doc["seconds"]), _text(doc["reason"]))
    if kind == "back":
        return HostBack(_text(doc["h"]))
    if kind == "hello":
        (start, end), ops = doc["journal"], doc.get("ops", [])
        return Hello(
            _text(doc["run"]),
            _int(doc["pid"]),
            _int(doc["v"]),
            _int(start),
            _int(end),
            judgement_of(doc["judgement"]),
            tuple(_text(op) for op in ops if op in OPS) if isinstance(ops, list) else (),
        )
    if kind == "gap":
        return Gap(_int(doc["from"]), _int(doc["to"]))
    if kind == "judged":
        return Judged(judgement_of(doc["judgement"]))
    if kind == "said":
        return Said(_text(doc["line"]))
    if kind == "reply":
        data = doc.get("data")
        return Reply(
            _text(doc["id"]),
            doc["ok"] is True,
            _text(doc["message"]),
            data if isinstance(data, dict) else {},
        )
    if kind == "ended":
        recovering = doc.get("recovering", False)
        if not isinstance(recovering, bool):
            return None
        return Ended(RunState(doc["state"]), _text(doc["detail"]), _int(doc["attempt"]), recovering)
    if kind == "attach":
        position = doc.get("from")
        return Attach(None if position is None else _int(position), _int(doc["v"]))
    if kind == "request":
        op = _text(doc["op"])
        if op not in OPS:
            return None
        began, back = doc.get("began"), doc.get("bring_back", [])
        if not isinstance(back, list) or len(back) > MAX_BROUGHT_BACK:
            return None
        return Request(
            _text(doc["id"]),
            op,
            doc.get("debug") is True,
            None if began is None else _number(began),
            tuple(_text(host) for host in back),
        )
    return None


def judgement_of(doc: Any) -> Judgement:
    """A judgement's document back as the value; ``ValueError`` for anything else."""
    if not isinstance(doc, dict):
        raise ValueError("not a judgement")
    notes = doc.get("notes")
    hang = doc.get("hang")
    return Judgement(
        RunState(doc["state"]),
        _int(doc["attempt"]),
        _text(doc["detail"]),
        {
            _text(host): _text(note)
            for host, note in (notes.items() if isinstance(notes, dict) else ())
        },
        None if hang is None else _hang(hang),
        _text(doc.get("progress", "")),
        doc.get("stepped") is True,
        _text(doc.get("doing", "")),
        tuple(_straggler(each) for each in doc.get("stragglers", ())),
    )


def _straggler(doc: Any) -> Straggler:
    if not isinstance(doc, dict):
        raise ValueError("not a straggler")
    return Straggler(
        _int(doc["rank"]),
        _text(doc["host"]),
        _number(doc["slower_by"]),
        _number(doc["since"]),
        _text(doc.get("cause", "")),
    )


def _hang(doc: Any) -> Hang:
    if not isinstance(doc, dict) or not isinstance(doc.get("ranks"), list):
        raise ValueError("not a hang")
    return Hang(
        since=_number(doc["since"]),
        window_s=_number(doc["window_s"]),
        step=_optional_int(doc.get("step")),
        ranks=tuple(
            RankAtHang(
                rank=_int(rank["rank"]),
                host=_text(rank["host"]),
                step=_optional_int(rank.get("step")),
                process=_optional_text(rank.get("process")),
                cpu_pct=_optional_number(rank.get("cpu_pct")),
                why=_optional_text(rank.get("why")),
            )
            for rank in doc["ranks"]
        ),
        quiet=doc.get("quiet") is True,
    )


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("not text")
    return value


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("not a whole number")
    return value


def _optional_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError("not a finite number")
    return float(value)


def _optional_number(value: Any) -> float | None:
    return None if value is None else _number(value)
