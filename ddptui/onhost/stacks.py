"""Every rank's Python stacks, from py-spy or from the handler every rank registers
(:data:`STACK_SITE`, written as the run's ``sitecustomize.py``), and the flight-recorder dumps
the ranks left."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from ddptui.onhost.common import FLIGHT_FILE, emit
from ddptui.onhost.processes import rank_processes, run_processes, stacks_dir

MAX_STACK_BYTES = 64 * 1024
"""Per rank: a deep stack of all threads is a few KiB; the answer of a host stays far below the
head's 1 MiB even with 16 ranks there."""


PY_SPY_S = 10.0


MAX_FLIGHT_FILES = 256


def dump(run_dir: Path, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    processes = run_processes(run_dir)
    attempt = max((of for _, _, of, _, _ in processes), default=0)
    ranks = rank_processes(processes, attempt)
    spy = shutil.which("py-spy")
    reports: dict[int, dict[str, Any]] = {}
    spying = {}
    for rank, (pid, name, _) in ranks.items():
        reports[rank] = {"rank": rank, "pid": pid, "name": name, "via": "", "text": ""}
        reports[rank].update(error="", note="")
        if spy is not None:
            spying[rank] = subprocess.Popen(
                [spy, "dump", "--pid", str(pid)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
    refused: dict[int, str] = {}
    for rank, child in spying.items():
        try:
            out, err = child.communicate(
                timeout=max(0.1, min(PY_SPY_S, deadline - time.monotonic()))
            )
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
        if child.returncode == 0 and out.strip():
            reports[rank].update(
                via="py-spy", text=out[:MAX_STACK_BYTES].decode("utf-8", "replace")
            )
        else:
            said = err.decode("utf-8", "replace").strip().splitlines()
            refused[rank] = said[-1] if said else f"exit status {child.returncode}"
    waiting = {}
    for rank, (pid, _, fields) in ranks.items():
        if reports[rank]["via"]:
            continue
        note = f"py-spy: {refused[rank][:300]}" if rank in refused else ""
        sent = signal_stack_handler(run_dir, pid, fields)
        if isinstance(sent, str):
            reports[rank]["error"] = f"{note}; {sent}" if note else sent
        else:
            waiting[rank] = sent
            reports[rank].update(via="faulthandler", note=note)
    while waiting and time.monotonic() < deadline:
        time.sleep(0.1)
        for rank in list(waiting):
            path, before, size, still = waiting[rank]
            now = path.stat().st_size if path.exists() else before
            if now > before and now == size and time.monotonic() - still >= 0.2:
                with path.open("rb") as handle:
                    handle.seek(before)
                    text = handle.read(min(now - before, MAX_STACK_BYTES))
                reports[rank]["text"] = text.decode("utf-8", "replace")
                del waiting[rank]
            elif now != size:
                waiting[rank] = (path, before, now, time.monotonic())
    for rank in waiting:
        reports[rank]["error"] = f"no stack within {seconds:g} s of the signal"
    flight = []
    for entry in sorted((run_dir / "node").glob("flight_*"))[:MAX_FLIGHT_FILES]:
        match = FLIGHT_FILE.match(entry.name)
        if match and entry.is_file():
            flight.append([int(match.group(1)), entry.stat().st_size])
    emit(
        {"attempt": attempt, "ranks": [reports[rank] for rank in sorted(reports)], "flight": flight}
    )
    return 0


def signal_stack_handler(
    run_dir: Path, pid: int, fields: list[str]
) -> tuple[Path, int, int, float] | str:
    """Signal ``pid`` to write its stacks, if its handler says it is in place: (stack file,
    size before, size now, when it last changed); else why it was not signalled."""
    directory = stacks_dir(run_dir)
    try:
        ready = json.loads((directory / f"{pid}.ready").read_text())
        signum, started = int(ready["signal"]), str(ready["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return (
            "no stack handler in this process (not a Python program, or started without "
            "ddptui's sitecustomize): not signalled"
        )
    # A pid the kernel gave to another process since: its start time differs.
    if len(fields) <= 19 or fields[19] != started:
        return "the process that registered the handler is gone: not signalled"
    if fields[0] in ("T", "t"):
        # Its handler would run only once it is continued: no answer now, a dump later.
        return "stopped (SIGSTOP, or a debugger holds it): no stack until it runs again"
    if not _catches(pid, signum):
        return "its interpreter has exited (native teardown still runs): no Python stack"
    path = directory / f"{pid}.txt"
    try:
        before = path.stat().st_size
        os.kill(pid, signum)
    except OSError as error:
        return f"cannot signal it: {error}"
    return path, before, before, time.monotonic()


def _catches(pid: int, signum: int) -> bool:
    """Whether ``pid`` has a handler for ``signum`` now (``SigCgt``): an exiting interpreter
    removes it long before the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return True
