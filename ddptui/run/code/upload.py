"""A run's code sent to a host through its node agent (what is sent:
:mod:`ddptui.run.code.contents`): the contents the host's cache lacks, in pieces, then the run's
code directory laid out from the cache."""

from __future__ import annotations

import base64
import hashlib
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from ddptui.config.model import HostConfig
from ddptui.layout import RECORD_NAME, code_dir
from ddptui.remote.transport import Transport
from ddptui.run.agent.call import NodeError, agent
from ddptui.run.code.contents import MIB, CodeTree
from ddptui.untrusted import count

UPLOAD_PIECE = 8 * MIB
"""Content sent per agent call: base64 in the agent's source, so a piece costs about 11 MB of
source for the host's Python to read, and a call's overhead is paid once per piece."""
STAGE_TIMEOUT_S = 300.0
"""Laying out and verifying 100 MiB of code on a slow disk takes seconds; this is plenty."""


async def send(
    remote: Transport, host: HostConfig, cache_dir: str, run_dir: str, tree: CodeTree, record: str
) -> tuple[int, bool]:
    """Stage ``tree`` in the run directory with the run's ``record`` beside it, in one call to
    the host when its cache has every content (a relaunch); else what it lacks is sent first.
    The bytes sent, and whether a host sharing the workdir had staged it already."""
    staged = await stage(remote, host, cache_dir, run_dir, tree, record)
    if not staged.missing:
        return 0, staged.shared
    sent = await upload_code(remote, host, cache_dir, tree, staged.missing)
    staged = await stage(remote, host, cache_dir, run_dir, tree, record)
    if staged.missing:
        raise NodeError(
            f"{host.name}: its code cache {cache_dir} lacks what was just sent to it (removed "
            "by something else?)"
        )
    return sent, staged.shared


async def upload_code(
    remote: Transport, host: HostConfig, cache_dir: str, tree: CodeTree, missing: Sequence[str]
) -> int:
    """Send the host's cache the contents of ``tree`` it lacks (``missing``, by SHA-256); the
    bytes sent."""
    contents = {file.sha256: file for file in tree.files}
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


@dataclass(frozen=True)
class Staged:
    """What the host said to a stage: the contents its cache lacks (then nothing was staged), or
    whether the code was there already (a host sharing the workdir staged it)."""

    missing: tuple[str, ...] = ()
    shared: bool = False


async def stage(
    remote: Transport, host: HostConfig, cache_dir: str, run_dir: str, tree: CodeTree, record: str
) -> Staged:
    """Lay ``tree`` out in the run's code directory from the host's cache, verified and renamed
    into place, and write the run's ``record`` beside it; or, when the cache lacks contents of
    it, only which."""
    manifest = tree.manifest()
    answer = await agent(
        remote,
        host,
        "stage",
        cache_dir,
        code_dir(run_dir),
        posixpath.join(run_dir, RECORD_NAME),
        sent={"manifest": manifest, "record": record},
        timeout=STAGE_TIMEOUT_S,
    )
    missing = answer.document.get("missing")
    if missing is not None:
        digests = {file.sha256 for file in tree.files}
        if (
            not isinstance(missing, list)
            or not missing
            or not all(isinstance(digest, str) and digest in digests for digest in missing)
        ):
            raise answer.garbage()
        return Staged(missing=tuple(sorted(set(missing))))
    if count(answer.document.get("staged"), len(manifest)) != len(manifest) or count(
        answer.document.get("written"), len(record)
    ) != len(record):
        raise answer.garbage()
    return Staged(shared=answer.document.get("shared") is True)
