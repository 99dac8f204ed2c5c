"""The node agent's client: operations on one node of a run (:mod:`ddptui.run.agent`).

Each call sends the agent to the host's Python and reads its one JSON answer, with a byte cap
and a deadline: the answer comes from a host, so it is parsed defensively and a bad one is a
:class:`NodeError` naming the host, never a crash (nor any other exception).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import posixpath
import secrets
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from ddptui.config.model import HostConfig
from ddptui.errors import DdptuiError
from ddptui.remote.commands import python_argv
from ddptui.remote.connection import RemoteCluster, RemoteError
from ddptui.untrusted import plain

AGENT_SOURCE: str = files("ddptui.run").joinpath("agent.py").read_text(encoding="utf-8")
AGENT_TIMEOUT_S = 30.0
MAX_ANSWER_CHARS = 1 << 20
_SKIPPED_IN_CODE = {"__pycache__"}


class NodeError(DdptuiError):
    """An operation on a node failed; the message names the host."""


@dataclass(frozen=True)
class AttemptStatus:
    """One attempt's processes on one host, as the agent saw them."""

    attempt: int
    pgid: int | None
    alive: bool
    exit: int | None
    processes: tuple[tuple[int, str], ...]


async def agent(
    remote: RemoteCluster,
    host: HostConfig,
    *args: str,
    timeout: float = AGENT_TIMEOUT_S,
) -> dict[str, Any]:
    """Run one agent command on ``host``; its JSON answer. Raises :class:`NodeError`."""
    result = await remote.run(
        host, python_argv(host, "-", *args), input=AGENT_SOURCE, timeout=timeout
    )
    if result.reach is not None:
        raise NodeError(f"{host.name}: {plain(result.reach.detail)}")
    if result.timed_out:
        raise NodeError(f"{host.name}: the node agent ({args[0]}) did not answer in {timeout:g} s")
    answer = _answer(result.stdout)
    if answer is None:
        why = result.stderr.strip().splitlines()[-1:] or [f"exit status {result.exit_status}"]
        raise NodeError(f"{host.name}: the node agent ({args[0]}) failed: {plain(why[0])}")
    if "error" in answer:
        raise NodeError(f"{host.name}: {plain(str(answer['error']), limit=2000)}")
    return answer


def _answer(stdout: str) -> dict[str, Any] | None:
    lines = stdout[-MAX_ANSWER_CHARS:].strip().splitlines()
    if not lines:
        return None
    try:
        answer = json.loads(lines[-1])
    except (ValueError, RecursionError):
        return None
    return answer if isinstance(answer, dict) else None


def trainer_source() -> Path:
    """The bundled trainer package's directory, found without importing it (it imports torch)."""
    spec = find_spec("trainer")
    if spec is None or not spec.submodule_search_locations:
        raise NodeError("the bundled trainer package is not installed next to ddptui")
    return Path(next(iter(spec.submodule_search_locations)))


def build_code_tree(destination: Path, entry: str, script: Path | None) -> dict[str, str]:
    """Lay out what goes to ``<run dir>/code`` under ``destination``; its SHA-256 manifest."""
    if entry == "trainer":
        shutil.copytree(
            trainer_source(), destination / "trainer", ignore=shutil.ignore_patterns("__pycache__")
        )
    elif entry == "script":
        assert script is not None
        if script.is_dir():
            shutil.copytree(
                script, destination / script.name, ignore=shutil.ignore_patterns("__pycache__")
            )
        elif script.is_file():
            shutil.copy2(script, destination / script.name)
        else:
            raise NodeError(f"[job] script {script} is neither a file nor a directory")
    manifest = {}
    for directory, dirnames, filenames in os.walk(destination):
        dirnames[:] = [name for name in dirnames if name not in _SKIPPED_IN_CODE]
        for name in filenames:
            path = Path(directory, name)
            manifest[path.relative_to(destination).as_posix()] = hashlib.sha256(
                path.read_bytes()
            ).hexdigest()
    return manifest


async def stage(
    remote: RemoteCluster, host: HostConfig, run_dir: str, tree: Path, manifest: Mapping[str, str]
) -> None:
    """Upload ``tree`` to ``run_dir/code`` atomically: a temporary directory, verified, renamed."""
    staging = posixpath.join(run_dir, f".code-{secrets.token_hex(4)}")
    try:
        await remote.put_files(host, tree, staging)
    except RemoteError as error:
        raise NodeError(str(error)) from None
    await agent(
        remote,
        host,
        "stage",
        staging,
        posixpath.join(run_dir, "code"),
        json.dumps(dict(manifest)),
        timeout=120.0,
    )


async def put_record(remote: RemoteCluster, host: HostConfig, run_dir: str, text: str) -> None:
    """Copy the run record to the host's run directory (``run.toml``)."""
    with tempfile.TemporaryDirectory(prefix="ddptui-record-") as directory:
        Path(directory, "run.toml").write_text(text, encoding="utf-8")
        try:
            await remote.put_files(host, Path(directory), run_dir)
        except RemoteError as error:
            raise NodeError(str(error)) from None


async def start(
    remote: RemoteCluster,
    host: HostConfig,
    run_dir: str,
    attempt: int,
    env: Mapping[str, str],
    argv: Sequence[str],
) -> int:
    """Start ``argv`` detached on ``host``; its process group id."""
    answer = await agent(remote, host, "start", run_dir, str(attempt), json.dumps(dict(env)), *argv)
    pgid = answer.get("pgid")
    if not isinstance(pgid, int) or isinstance(pgid, bool) or pgid <= 1:
        raise NodeError(f"{host.name}: the node agent gave no process group")
    return pgid


async def status(
    remote: RemoteCluster, host: HostConfig, run_dir: str, *, wait: float = 0.0
) -> list[AttemptStatus]:
    """Every attempt of the run on ``host``: process group, liveness, processes, exit status.

    With ``wait``, the answer comes once no process of the run is left on the host, or after
    ``wait`` seconds.
    """
    if wait > 0:
        command = ["wait", run_dir, f"{wait:g}"]
        answer = await agent(remote, host, *command, timeout=wait + AGENT_TIMEOUT_S)
    else:
        answer = await agent(remote, host, "status", run_dir)
    attempts = answer.get("attempts")
    found = []
    if isinstance(attempts, dict):
        for number, value in attempts.items():
            whole = isinstance(number, str) and number.isascii() and number.isdigit()
            if not (whole and len(number) <= 9 and isinstance(value, dict)):
                continue
            processes = value.get("processes")
            found.append(
                AttemptStatus(
                    attempt=int(number),
                    pgid=_int(value.get("pgid")),
                    alive=value.get("alive") is True,
                    exit=_int(value.get("exit")),
                    processes=tuple(
                        (item[0], plain(item[1], limit=64, one_line=True))
                        for item in (processes if isinstance(processes, list) else [])[:256]
                        if isinstance(item, list)
                        and len(item) == 2
                        and isinstance(item[0], int)
                        and isinstance(item[1], str)
                    ),
                )
            )
    return sorted(found, key=lambda item: item.attempt)


async def send_signal(
    remote: RemoteCluster, host: HostConfig, run_dir: str, name: str
) -> list[str]:
    """Send SIGname to every live process group of the run on ``host``; what it reached."""
    answer = await agent(remote, host, "signal", run_dir, name)
    reached = []
    signalled = answer.get("signalled")
    for item in signalled if isinstance(signalled, list) else []:
        if isinstance(item, dict) and isinstance(item.get("processes"), list):
            reached += [plain(str(name), limit=64, one_line=True) for name in item["processes"]]
    return reached


async def request(remote: RemoteCluster, host: HostConfig, run_dir: str, what: str) -> None:
    """Create ``control/<what>`` for the trainer (``stop`` or ``save``)."""
    await agent(remote, host, "control", run_dir, what)


async def free_port(remote: RemoteCluster, host: HostConfig, wanted: int = 0) -> int:
    """``wanted`` if it is free on ``host`` now (else :class:`NodeError`), or any free port."""
    answer = await agent(remote, host, "free-port", str(wanted))
    port = _int(answer.get("port"))
    if port is None or not 1 <= port <= 65535:
        raise NodeError(f"{host.name}: the node agent found no free port")
    return port


async def all_of(coroutines: Sequence[Any]) -> list[Any]:
    """Await every coroutine, all at once; the results, or the first error once all ended."""
    results = await asyncio.gather(*coroutines, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
