"""The notify hook: a user's program run on the head node when a run has an incident.

It gets one JSON line on stdin (:func:`incident_document`): ``{"v": 1, "run", "hosts_file",
"incident": {every field of the incident, and "steps_redone"}, "set_aside": [{"host", "why",
"at"}]}``, ASCII only, so a host's control characters travel as JSON escapes and no terminal
or log the program writes to meets them raw. Its outcome is words for the incident's
``notified`` (``ok``, or what went wrong), never an exception (a cancellation still goes
through): a broken hook must not stop the supervisor that runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Mapping, Sequence

from ddptui.aio import wait_for
from ddptui.run.incidents import Incident
from ddptui.run.record import RunRecord
from ddptui.untrusted import plain_bytes, plain_error

NOTIFY_VERSION = 1
KEPT_STDERR = 4096
"""Bytes of the program's stderr kept for the words of its failure; the rest is read and
dropped, so a chatty program never blocks on a full pipe."""
END_S = 2.0
"""How long a killed program's group is given to go, and its stderr to close."""


def incident_document(record: RunRecord, incident: Incident) -> dict[str, object]:
    """What the notify hook is told of ``incident`` of ``record``'s run."""
    return {
        "v": NOTIFY_VERSION,
        "run": record.id,
        "hosts_file": record.hosts_file,
        "incident": incident.to_json(),
        "set_aside": [host.to_json() for host in record.set_aside],
    }


async def notify(
    argv: Sequence[str], document: Mapping[str, object], *, deadline_s: float = 10.0
) -> str:
    """Run ``argv`` (no shell) with ``document`` on its stdin; ``ok`` when it exits 0 within
    ``deadline_s``, else what went wrong. At the deadline (or a cancellation) its whole
    process group is killed."""
    if not argv:
        return "notify could not start: no program given"
    try:
        line = json.dumps(document, ensure_ascii=True, allow_nan=False) + "\n"
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            # A session of its own: at the deadline, what it started is killed with it, and a
            # signal meant for its group never reaches the supervisor.
            start_new_session=True,
        )
    except (OSError, ValueError, TypeError) as error:
        return f"notify could not start: {plain_error(error)}"
    finished = False
    try:
        stderr = await wait_for(_converse(process, line.encode("ascii")), deadline_s)
        finished = True
    except asyncio.TimeoutError:
        return f"notify did not finish in {deadline_s:g} s: killed"
    except OSError as error:
        return f"notify failed: {plain_error(error)}"
    finally:
        if not finished:
            await _end(process)
    return _outcome(process.returncode, stderr)


async def _converse(process: asyncio.subprocess.Process, line: bytes) -> bytes:
    """Send ``line`` while reading stderr to its end (a program that writes before it reads
    would otherwise wait on us as we wait on it), then wait for the exit."""
    _, kept = await asyncio.gather(_feed(process, line), _kept_stderr(process))
    await process.wait()
    return kept


async def _feed(process: asyncio.subprocess.Process, line: bytes) -> None:
    assert process.stdin is not None
    process.stdin.write(line)
    # A program may exit, or close its stdin, without reading (a broken pipe, a reset): its
    # exit status is what counts.
    with contextlib.suppress(OSError):
        await process.stdin.drain()
    process.stdin.close()


async def _kept_stderr(process: asyncio.subprocess.Process) -> bytes:
    """The start of the program's stderr; the rest is read and dropped."""
    assert process.stderr is not None
    kept = bytearray()
    while chunk := await process.stderr.read(65536):
        kept += chunk[: KEPT_STDERR - len(kept)]
    return bytes(kept)


def _outcome(returncode: int | None, stderr: bytes) -> str:
    if returncode == 0:
        return "ok"
    if returncode is not None and returncode < 0:
        try:
            said = f"notify was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            said = f"notify was killed by signal {-returncode}"
    else:
        said = f"notify exited {returncode}"
    first = next((text for text in stderr.splitlines() if text.strip()), b"")
    return f"{said}: {plain_bytes(first.strip(), limit=300, one_line=True)}" if first else said


async def _end(process: asyncio.subprocess.Process) -> None:
    """Kill the program's group and read what is left of its stderr: the pipe closes only at
    its end, and left open it outlives the event loop."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(asyncio.TimeoutError):
        await wait_for(process.wait(), END_S)
    assert process.stderr is not None
    with contextlib.suppress(asyncio.TimeoutError):
        await wait_for(_discard(process.stderr), END_S)


async def _discard(reader: asyncio.StreamReader) -> None:
    while await reader.read(65536):
        pass
