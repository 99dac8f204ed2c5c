"""Run the trainer the way ddptui does: a copy in <run_dir>/code, ``-m trainer`` from there."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).resolve().parents[2] / "trainer"


def install(run_dir: Path) -> Path:
    code = run_dir / "code"
    if not (code / "trainer").exists():
        shutil.copytree(SOURCE, code / "trainer", ignore=shutil.ignore_patterns("__pycache__"))
    return code


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _env() -> dict[str, str]:
    # The copy in <run_dir>/code (first on sys.path under -m) is what must run, as on a host.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONWARNINGS"] = "ignore"
    return env


def torchrun(run_dir: Path, args: Sequence[str], nproc: int = 2) -> subprocess.Popen[bytes]:
    code = install(run_dir)
    argv = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", "1", "--node_rank", "0", "--nproc-per-node", str(nproc),
        "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
        "-m", "trainer", "--run-dir", str(run_dir), *args,
    ]  # fmt: skip
    log = (run_dir / "torchrun.log").open("ab")
    return subprocess.Popen(
        argv, cwd=code, env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended and not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2][:1] != "Z"
    except OSError:
        return False


def kill_ranks(run_dir: Path, ranks: int) -> None:
    """SIGKILL every rank of the latest launch at once, as a node lost whole: torchrun starts
    each in a session of its own, so its process group is torchrun's alone."""
    pids = [events(run_dir, rank, "start")[-1]["pid"] for rank in range(ranks)]
    # Every one stopped first: one killed while another runs would let that one see its peer
    # go, and write a rescue.
    for number in (signal.SIGSTOP, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, number)


def finish(proc: subprocess.Popen[bytes], timeout: float = 120) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


def standalone(
    run_dir: Path, args: Sequence[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    code = install(run_dir)
    return subprocess.run(
        [sys.executable, "-m", "trainer", "--run-dir", str(run_dir), *args],
        cwd=code,
        env={**_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def events(run_dir: Path, rank: int, kind: str | None = None) -> list[dict[str, Any]]:
    path = run_dir / "events" / f"rank{rank}.jsonl"
    if not path.exists():
        return []
    # A line still being written has no newline yet; leave it for the next read.
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    found = [json.loads(line) for line in lines]
    return [e for e in found if kind is None or e["type"] == kind]


def wait_for(condition: Callable[[], Any], timeout: float = 60, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def losses(run_dir: Path, rank: int) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in events(run_dir, rank, "step")}


def words(path: Path, count: int) -> Path:
    """A text of ``count`` words drawn (seeded) from a dozen: data for the char LM."""
    rng = random.Random(0)
    vocabulary = ["the", "cat", "sat", "on", "a", "mat", "while", "dogs", "ran", "far", "from",
                  "home"]  # fmt: skip
    path.write_text(" ".join(rng.choice(vocabulary) for _ in range(count)) + "\n")
    return path
