"""A run's code sent to a host through its node agent (what is sent: :mod:`ddptui.run.code`):
the contents the host's cache lacks, in pieces, then the run's code directory laid out from the
cache."""

from __future__ import annotations

import base64
import hashlib

from ddptui.config.model import HostConfig
from ddptui.remote.transport import Transport
from ddptui.run.agent_call import NodeError, agent
from ddptui.run.code import MIB, CodeTree
from ddptui.run.layout import code_dir
from ddptui.untrusted import count

UPLOAD_PIECE = 8 * MIB
"""Content sent per agent call: base64 in the agent's source, so a piece costs about 11 MB of
source for the host's Python to read, and a call's overhead is paid once per piece."""
STAGE_TIMEOUT_S = 300.0
"""Laying out and verifying 100 MiB of code on a slow disk takes seconds; this is plenty."""


async def upload_code(remote: Transport, host: HostConfig, cache_dir: str, tree: CodeTree) -> int:
    """Send the host's cache of code contents what it lacks of ``tree``; the bytes sent."""
    contents = {file.sha256: file for file in tree.files}
    answer = await agent(remote, host, "have", cache_dir, sent=sorted(contents))
    missing = answer.document.get("missing")
    if not isinstance(missing, list) or not all(
        isinstance(digest, str) and digest in contents for digest in missing
    ):
        raise answer.garbage()
    pieces: list[list[object]] = []
    pending = sent = 0
    for digest in missing:
        file = contents[digest]
        read = hashlib.sha256()
        try:
            with file.source.open("rb") as handle:
                offset = 0
                while True:
                    room = UPLOAD_PIECE - pending
                    data = handle.read(room)
                    read.update(data)
                    # A short read is the end: the last piece says the size, which ends it.
                    end = len(data) < room
                    if end and read.hexdigest() != digest:
                        # The host would refuse it as damaged: say what happened instead.
                        raise NodeError(
                            f"{file.source} changed while it was uploaded (a log, or a file "
                            "being written?): leave it out with [job] exclude or .gitignore"
                        )
                    encoded = base64.b64encode(data).decode("ascii")
                    offset += len(data)
                    pieces.append([digest, offset - len(data), encoded, offset if end else None])
                    pending += len(data)
                    if pending >= UPLOAD_PIECE:
                        await _put(remote, host, cache_dir, pieces)
                        sent, pending, pieces = sent + pending, 0, []
                    if end:
                        break
        except OSError as error:
            raise NodeError(f"cannot read {file.source}: {error.strerror}") from None
    if pieces:
        await _put(remote, host, cache_dir, pieces)
        sent += pending
    return sent


async def _put(
    remote: Transport, host: HostConfig, cache_dir: str, pieces: list[list[object]]
) -> None:
    answer = await agent(remote, host, "put", cache_dir, sent=pieces, timeout=STAGE_TIMEOUT_S)
    if count(answer.document.get("stored"), len(pieces)) != len(pieces):
        raise answer.garbage()


async def stage(
    remote: Transport, host: HostConfig, cache_dir: str, run_dir: str, tree: CodeTree
) -> bool:
    """Lay ``tree`` out in the run's code directory from the host's cache, verified and renamed
    into place; True when a host sharing the workdir had staged it already."""
    manifest = tree.manifest()
    answer = await agent(
        remote,
        host,
        "stage",
        cache_dir,
        code_dir(run_dir),
        sent=manifest,
        timeout=STAGE_TIMEOUT_S,
    )
    if count(answer.document.get("staged"), len(manifest)) != len(manifest):
        raise answer.garbage()
    return answer.document.get("shared") is True
