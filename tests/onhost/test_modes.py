"""What ddptui makes on a host has modes of its own, whatever the umask: with 002 and a primary
group shared with others (common on clusters), a member of that group could otherwise replace
the ``sitecustomize.py`` every rank imports, the frameworks' hooks it loads, or the staged code.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import subprocess
import sys
import time
from importlib.util import cache_from_source
from pathlib import Path

import pytest

from ddptui.onhost import cache, probe_torch_cache, probe_workdir, processes
from ddptui.onhost.probe_torch_cache import TORCH_CACHE_DIR
from ddptui.remote.programs import agent_program
from tests.helpers import OTHER, USER, as_user, attempts_to_replace, owned_dir, shared_tmp
from tests.onhost.agent import agent

RUN_ID = "20260101-000000-abcd"
CODE = b"import lib.helper\n"
HELPER = b"X = 1\n"
TOOL = b"#!/bin/sh\necho tool\n"
RECORD = "id = 'x'\nenv = {TOKEN = 'secret'}\n"


def _sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _pieces(content: bytes) -> list[list[object]]:
    return [[_sha(content), 0, base64.b64encode(content).decode(), len(content)]]


MANIFEST = {
    "train.py": [_sha(CODE), False],
    "lib/helper.py": [_sha(HELPER), False],
    "bin/tool": [_sha(TOOL), True],
}


def _foreground(run_dir: Path, code: Path, attempt: str, umask: int, *command: str) -> None:
    """The agent's ``run`` (how a Slurm step runs a node): a rank's process (``RANK`` set, its
    parent the agent) loads the stack handler, which makes its files."""
    # As Python does by default: the rank writes the bytecode of what it imports.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(
        [sys.executable, "-", "run", str(run_dir), str(code), attempt, *command],
        input=agent_program(),
        text=True,
        capture_output=True,
        timeout=120,
        check=True,
        umask=umask,
        env=env,
    )


def _host_run(workdir: Path, umask: int) -> Path:
    """A run on a host as the agent makes it, with ``umask``: its code uploaded and staged, its
    record written, an attempt run in the foreground whose rank imports the staged code and
    one started detached, a stop asked, the bandwidth benchmark written. Its node's directory.
    """
    code_cache = workdir / "code-cache"
    root = workdir / "runs" / RUN_ID
    run_dir, code = root / "node0", root / "code"
    for content in (CODE, HELPER, TOOL):
        agent("put", str(code_cache), sent=_pieces(content), umask=umask)
    sent = {"manifest": MANIFEST, "record": RECORD}
    record = str(run_dir / "run.toml")
    staged = agent("stage", str(code_cache), str(code), record, sent=sent, umask=umask)
    assert staged["staged"] == len(MANIFEST)
    # A rank as torchrun makes one: RANK set for it, not for its parent.
    _foreground(run_dir, code, "1", umask, "env", "RANK=0", sys.executable, "-c", "import train")
    assert "pgid" in agent("start", str(run_dir), str(code), "2", "true", umask=umask)
    deadline = time.monotonic() + 30
    while not (run_dir / "node" / "attempt-2.exit").exists():
        assert time.monotonic() < deadline, "the detached attempt never ended"
        time.sleep(0.05)
    agent("control", str(run_dir), "stop", umask=umask)
    agent("write", str(workdir / "bandwidth" / "bench.py"), sent="print('bench')\n", umask=umask)
    return run_dir


def _modes(top: Path) -> dict[str, int]:
    """Every file and directory under ``top``, by its path there: its permission bits."""
    found = {}
    for directory, names, files in os.walk(top):
        for name in (*names, *files):
            path = Path(directory, name)
            found[path.relative_to(top).as_posix()] = stat.S_IMODE(path.lstat().st_mode)
    return found


RANKS_MAKE = (".pyc", ".txt", ".ready")
"""What a rank's own process makes (Python its bytecode, the stack handler its files): no more
than 0644, which its umask may narrow."""


def _expected(relative: str, mode: int, umask: int) -> int:
    if stat.S_ISDIR(mode) or relative.endswith("bin/tool"):
        return 0o755
    if relative.endswith("run.toml") or relative.startswith("code-cache/"):
        return 0o600
    return 0o644 & ~umask if relative.endswith(RANKS_MAKE) else 0o644


@pytest.mark.parametrize("umask", [0o002, 0o077], ids=["umask 002", "umask 077"])
def test_what_the_agent_makes_has_the_same_modes_whatever_the_umask(
    tmp_path: Path, umask: int
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir(mode=0o700)
    run_dir = _host_run(workdir, umask)
    stacks = run_dir / "node" / "stacks"
    assert any(stacks.glob("*.ready")), "no rank loaded the stack handler"
    assert Path(cache_from_source(str(stacks / "site" / "sitecustomize.py"))).exists()
    assert Path(cache_from_source(str(run_dir.parent / "code" / "lib" / "helper.py"))).exists()
    modes = _modes(workdir)
    kinds = {relative: (workdir / relative).lstat().st_mode for relative in modes}
    wrong = {
        relative: f"{mode:04o}"
        for relative, mode in modes.items()
        if mode != _expected(relative, kinds[relative], umask)
    }
    assert wrong == {}
    assert workdir.stat().st_mode & 0o777 == 0o700, "the workdir was not ddptui's to change"


def test_what_the_probe_keeps_in_the_workdir_has_its_own_modes_whatever_the_umask(
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "work"
    fingerprint = {"torch": "2.13.0"}
    old = os.umask(0o002)
    try:
        probe_workdir.identity_section(str(workdir))
        probe_torch_cache.keep_torch(str(workdir), fingerprint, {"status": "ok"})
    finally:
        os.umask(old)
    kept = workdir / TORCH_CACHE_DIR
    assert stat.S_IMODE(workdir.stat().st_mode) == 0o755
    assert stat.S_IMODE(kept.stat().st_mode) == 0o755
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in kept.iterdir()} == {
        probe_workdir.WORKDIR_ID: 0o644,
        probe_torch_cache.torch_cache_path(str(workdir)).name: 0o644,
    }


# --- two users sharing a group, played as root ------------------------------------------


def test_another_member_of_the_group_cannot_replace_what_the_ranks_import() -> None:
    with shared_tmp() as shared:
        workdir = owned_dir(shared / "work")
        code_cache = workdir / "code-cache"
        root = workdir / "runs" / RUN_ID
        run_dir, code = root / "node0", root / "code"

        def launch() -> Path | None:
            for content in (CODE, HELPER, TOOL):
                cache.put(code_cache, _pieces(content))
            sent = {"manifest": MANIFEST, "record": RECORD}
            cache.stage(code_cache, code, run_dir / "run.toml", sent)
            return processes.stack_site(run_dir)

        site = as_user(USER, launch)
        assert site is not None
        imported = [
            site / "sitecustomize.py",
            site / "ddptui_instrument.py",
            site / "ddptui_instrument_frameworks.py",
            code / "train.py",
            code / "lib" / "helper.py",
            run_dir / "run.toml",
        ]
        # A .pyc of theirs in a __pycache__ would run instead of its source.
        bytecode = [Path(cache_from_source(str(path))) for path in imported[:2]]
        assert as_user(OTHER, lambda: attempts_to_replace(imported + bytecode)) == []
