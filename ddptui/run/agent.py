"""The node agent: a stdlib-only script sent to each host's Python (like the probe).

``python - COMMAND ARGS…`` with this file on stdin. It never imports ddptui, so hosts need
only Python ≥ 3.8; annotations are never evaluated (``from __future__ import annotations``).
Every command prints JSON: one document, or for ``follow`` one per line.

Commands:

- ``start RUN_DIR CODE_DIR ATTEMPT ENV_JSON CMD…``: start CMD detached (its own session and
  process group, stdio from/to files) with cwd CODE_DIR; a small shell wrapper records
  torchrun's exit status in ``node/attempt-N.exit``. Prints ``{"pgid": N}``.
- ``status RUN_DIR``: every attempt's processes (found by the ``DDPTUI_RUN_DIR`` and
  ``DDPTUI_ATTEMPT`` every one inherits), whether any lives, and torchrun's exit status.
- ``signal RUN_DIR SIGNAL``: send SIGNAL to every process of the run.
- ``wait RUN_DIR SECONDS``: as ``status``, once no process of the run is left or at the latest
  after SECONDS.
- ``control RUN_DIR NAME``: create ``control/NAME`` (``stop`` or ``save``) for the trainer.
- ``have CACHE_DIR``: which of the contents (SHA-256) in :data:`SENT` the host's cache of code
  contents lacks: ``{"missing": [...]}``. Those it holds are touched (the cache keeps what was
  used in the last :data:`CACHE_DAYS` days).
- ``put CACHE_DIR``: write the pieces in :data:`SENT` (``[sha256, offset, base64, size or
  null]``; a size ends the content) into the cache; an ended content is verified, then renamed
  into place. Hosts that share the directory may write the same content at once: the same
  bytes at the same offsets.
- ``stage CACHE_DIR CODE_DIR``: lay out the code directory from the cache as :data:`SENT`
  (path → ``[sha256, executable]``) says, verifying each file as it is copied, in a staging
  directory renamed into place (the code is all there or not at all). A code directory that is
  there already (a host sharing this workdir staged it) is verified instead.
- ``write PATH``: write the text in :data:`SENT` to PATH, atomically.
- ``list-files DIR``: for each glob in :data:`SENT` (relative to DIR), the regular files it
  matches there, ``[path, size, mtime]`` each (at most 1,000 per glob).
- ``free-port [PORT]``: a TCP port that is free on this host now (PORT itself, or an error).
- ``dump RUN_DIR SECONDS``: every rank's Python stacks (all threads) in the latest attempt, from
  ``py-spy dump`` where it is installed and allowed, else from the handler :data:`STACK_SITE`
  registered in the rank (signalled only once its ready file says the handler is in place),
  within SECONDS: ``{"attempt": N, "ranks": [{"rank", "pid", "name", "via", "text", "error",
  "note"}], "flight": [[rank, size], ...]}`` (``note``: why py-spy was not used where it is
  installed; ``flight``: the ranks' flight-recorder dumps in ``node/``).
- ``follow RUN_DIR``: stream new lines of the run's files from the byte offsets in
  :data:`SENT` (path → offset), and a heartbeat with process and GPU samples every 2 s, until
  killed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_LINE = 16384
"""Longer lines are cut (the rest up to the newline is skipped); the head caps them anyway."""
READ_CHUNK = 1 << 20
POLL_S = 0.25
HEARTBEAT_S = 2.0
SETTLED_S = 1.0
WAIT_POLL_S = 0.25
CACHE_DAYS = 14
# These two patterns are ddptui.run.layout's (this file cannot import it); a test keeps them equal.
FOLLOWED = re.compile(
    r"^(events/[^/]+\.jsonl"
    r"|logs/attempt-\d+/.+/(stdout|stderr)\.log"
    r"|logs/attempt-\d+/.+/error\.json"
    r"|node/attempt-\d+\.(out|exit))$"
)
RUN_MARK = "DDPTUI_RUN_DIR"
ATTEMPT_MARK = "DDPTUI_ATTEMPT"
STACKS_MARK = "DDPTUI_STACKS_DIR"
MAX_STACK_BYTES = 64 * 1024
"""Per rank: a deep stack of all threads is a few KiB; the answer of a host stays far below the
head's 1 MiB even with 16 ranks there."""
PY_SPY_S = 10.0
MAX_FLIGHT_FILES = 256

# Put first on every rank's PYTHONPATH, so any Python script (the trainer or the user's own)
# registers it before its first line runs. It must never break the process it runs in, and a
# sitecustomize the user already has runs after it, as if this one were not there.
STACK_SITE = """\
import os
import sys


def _ddptui_stack_handler():
    import faulthandler
    import json
    import signal

    directory = os.environ.get("DDPTUI_STACKS_DIR")
    rank = os.environ.get("RANK")
    if not directory or rank is None or not hasattr(signal, "SIGRTMIN"):
        return
    # Only a rank's own process: not torchrun, nor what a rank starts (its workers inherit RANK).
    try:
        with open("/proc/%d/environ" % os.getppid(), "rb") as parent:
            if ("RANK=" + rank).encode() in parent.read().split(b"\\0"):
                return
    except OSError:
        pass
    # A real-time signal few programs use: its default action ends the process, so the agent
    # sends it only to a process whose ready file below says this handler is in place.
    signum = signal.SIGRTMIN + 6
    pid = os.getpid()
    with open("/proc/self/stat") as stat:
        started = stat.read().rpartition(")")[2].split()[19]
    stacks = open(os.path.join(directory, "%d.txt" % pid), "ab", buffering=0)
    faulthandler.register(signum, file=stacks, all_threads=True, chain=False)
    ready = os.path.join(directory, "%d.ready" % pid)
    with open(ready + ".tmp", "w") as out:
        json.dump({"signal": int(signum), "started": started}, out)
    os.replace(ready + ".tmp", ready)


def _ddptui_next_sitecustomize():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _ddptui_stack_handler()
except Exception:
    pass
_ddptui_next_sitecustomize()
"""
ATTEMPT_FILE = re.compile(r"^attempt-(\d+)\.(pgid|exit)$")
FLIGHT_FILE = re.compile(r"^flight_(\d{1,6})$")

# The wrapper survives SIGTERM/SIGINT sent to its group (the trap), so it can record how the
# command ended; the command itself gets the default dispositions back at exec.
WRAPPER = """\
trap : TERM INT HUP
out=$1; exit_file=$2; shift 2
"$@" >"$out" 2>&1 </dev/null
status=$?
printf '%s\\n' "$status" >"$exit_file.tmp" && mv "$exit_file.tmp" "$exit_file"
"""


def emit(document: dict[str, Any]) -> None:
    # Flushed at exit, or by ``follow`` once per round: a flush per line was a packet per line
    # on the SSH channel, which the head node pays for in CPU.
    sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")


def write_atomic(path: Path, text: str) -> None:
    # A name of its own: hosts that share the directory may write the same file at once.
    temporary = path.with_name(path.name + "." + os.urandom(4).hex() + ".tmp")
    temporary.write_text(text)
    temporary.replace(path)


def start(run_dir: Path, code_dir: Path, attempt: str, env_json: str, command: list[str]) -> int:
    directory = run_dir / "node"
    directory.mkdir(parents=True, exist_ok=True)
    pgid_file = directory / f"attempt-{attempt}.pgid"
    if pgid_file.exists():
        emit({"error": f"attempt {attempt} was already started on this host"})
        return 1
    env = dict(os.environ)
    env.update(json.loads(env_json))
    # Every process of the run inherits these (torchrun starts its workers in sessions of
    # their own, so a process group would miss them): they are how the run's processes are
    # found, signalled and counted.
    env[RUN_MARK] = str(run_dir)
    env[ATTEMPT_MARK] = attempt
    site = stack_site(run_dir)
    if site is not None:
        env[STACKS_MARK] = str(site.parent)
        path = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(site) + (os.pathsep + path if path else "")
    out = directory / f"attempt-{attempt}.out"
    exit_file = directory / f"attempt-{attempt}.exit"
    try:
        child = subprocess.Popen(
            ["sh", "-c", WRAPPER, "ddptui-node", str(out), str(exit_file), *command],
            cwd=str(code_dir),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as error:
        emit({"error": f"cannot start: {error}"})
        return 1
    write_atomic(pgid_file, f"{child.pid}\n")
    emit({"pgid": child.pid})
    return 0


def stacks_dir(run_dir: Path) -> Path:
    return run_dir / "node" / "stacks"


def stack_site(run_dir: Path) -> Path | None:
    """The directory holding :data:`STACK_SITE` as ``sitecustomize.py``; None if it cannot be
    written (the run goes on without stack dumps rather than not at all)."""
    site = stacks_dir(run_dir) / "site"
    try:
        site.mkdir(parents=True, exist_ok=True)
        write_atomic(site / "sitecustomize.py", STACK_SITE)
    except OSError:
        return None
    return site


def run_processes(run_dir: Path) -> list[tuple[int, str, int, list[str], int | None]]:
    """(pid, name, attempt, /proc stat fields after the name, global rank or None) of every
    process of the run; torchrun gives each worker (and whatever it starts) ``RANK``."""
    mark = f"{RUN_MARK}={run_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            if mark not in environ:
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        attempt = 0
        rank = None
        for item in environ:
            if item.startswith(ATTEMPT_MARK.encode() + b"="):
                value = item.partition(b"=")[2]
                attempt = int(value) if value.isdigit() else 0
            elif item.startswith(b"RANK="):
                value = item.partition(b"=")[2]
                rank = int(value) if value.isdigit() else None
        name_end = stat.rfind(")")
        name = stat[stat.find("(") + 1 : name_end]
        found.append((int(entry.name), name, attempt, stat[name_end + 2 :].split(), rank))
    return found


def rank_processes(
    processes: list[tuple[int, str, int, list[str], int | None]], attempt: int
) -> dict[int, tuple[int, str, list[str]]]:
    """Rank → (pid, name, stat fields) of each rank's own process in ``attempt``: not what it
    started (data loader workers inherit ``RANK``)."""
    rank_of = {pid: rank for pid, _, _, _, rank in processes}
    found = {}
    for pid, name, of, fields, rank in processes:
        if of != attempt or rank is None:
            continue
        try:
            parent = int(fields[1])
        except (IndexError, ValueError):
            continue
        if rank_of.get(parent) != rank:
            found[rank] = (pid, name, fields)
    return found


def attempts(run_dir: Path) -> dict[int, dict[str, int]]:
    found: dict[int, dict[str, int]] = {}
    try:
        entries = list((run_dir / "node").iterdir())
    except OSError:
        return found
    for entry in entries:
        match = ATTEMPT_FILE.match(entry.name)
        if not match:
            continue
        try:
            value = int(entry.read_text().strip())
        except (OSError, ValueError):
            continue
        found.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return found


def status(run_dir: Path) -> int:
    processes = run_processes(run_dir)
    report = {}
    for attempt, files in sorted(attempts(run_dir).items()):
        mine = [[pid, name] for pid, name, of, _, _ in processes if of == attempt]
        report[str(attempt)] = {
            "pgid": files.get("pgid"),
            "alive": bool(mine),
            "exit": files.get("exit"),
            "processes": mine,
        }
    emit({"attempts": report, "time": time.time()})
    return 0


def send_signal(run_dir: Path, name: str) -> int:
    number = getattr(signal, "SIG" + name)
    signalled: dict[int, list[str]] = {}
    for pid, process_name, attempt, _, _ in run_processes(run_dir):
        try:
            os.kill(pid, number)
        except ProcessLookupError:
            continue
        signalled.setdefault(attempt, []).append(process_name)
    emit(
        {
            "signalled": [
                {"attempt": attempt, "processes": names}
                for attempt, names in sorted(signalled.items())
            ]
        }
    )
    return 0


def wait_gone(run_dir: Path, seconds: float) -> int:
    """Return once no process of the run is left, or after ``seconds``; then as ``status``.

    One process watching on the host instead of the head asking every second: on a loaded
    machine that polling competes with the very shutdown it waits for.
    """
    deadline = time.monotonic() + seconds
    while run_processes(run_dir) and time.monotonic() < deadline:
        time.sleep(WAIT_POLL_S)
    return status(run_dir)


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
    path = directory / f"{pid}.txt"
    try:
        before = path.stat().st_size
        os.kill(pid, signum)
    except OSError as error:
        return f"cannot signal it: {error}"
    return path, before, before, time.monotonic()


def control(run_dir: Path, name: str) -> int:
    directory = run_dir / "control"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).touch()
    emit({"created": name})
    return 0


def sha256_of(path: Path, copy_to: Path | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        if copy_to is None:
            for chunk in iter(lambda: handle.read(READ_CHUNK), b""):
                digest.update(chunk)
        else:
            with copy_to.open("wb") as out:
                for chunk in iter(lambda: handle.read(READ_CHUNK), b""):
                    digest.update(chunk)
                    out.write(chunk)
    return digest.hexdigest()


def have(cache: Path) -> int:
    missing = []
    now = time.time()
    for digest in SENT:
        path = cache / str(digest)
        try:
            os.utime(path, (now, now))
        except OSError:
            missing.append(digest)
    # Once per staging, after this one's contents were touched: not once per piece sent.
    if cache.is_dir():
        prune(cache)
    emit({"missing": missing})
    return 0


def put(cache: Path) -> int:
    cache.mkdir(parents=True, exist_ok=True)
    for digest, offset, data, size in SENT:
        part = cache / (str(digest) + ".part")
        handle = os.open(str(part), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.pwrite(handle, base64.b64decode(data), int(offset))
            if size is not None:
                # What an upload that broke off left beyond the end is not the content's.
                os.ftruncate(handle, int(size))
        finally:
            os.close(handle)
        if size is None:
            continue
        final = cache / str(digest)
        try:
            good = sha256_of(part) == digest
        except FileNotFoundError:
            # A host sharing this cache finished the same content first.
            good = final.exists()
        else:
            if good:
                part.replace(final)
        if not good:
            part.unlink()
            emit({"error": f"content {digest[:12]} arrived damaged: checksum mismatch"})
            return 1
    emit({"stored": len(SENT)})
    return 0


def prune(cache: Path) -> None:
    horizon = time.time() - CACHE_DAYS * 86400
    for entry in cache.iterdir():
        try:
            if entry.stat().st_mtime < horizon:
                entry.unlink()
        except OSError:
            continue


def stage(cache: Path, code_dir: Path) -> int:
    manifest = SENT
    if code_dir.exists():
        return staged_already(code_dir, manifest)
    stage_dir = code_dir.with_name(".code-" + os.urandom(4).hex())
    placed = False
    try:
        for relative, (digest, executable) in sorted(manifest.items()):
            target = stage_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                copied = sha256_of(cache / digest, copy_to=target)
            except OSError as error:
                emit({"error": f"{relative}: {error}"})
                return 1
            if copied != digest:
                emit({"error": f"{relative}: the cached copy is damaged (checksum mismatch)"})
                (cache / digest).unlink()
                return 1
            if executable:
                target.chmod(0o755)
        try:
            stage_dir.rename(code_dir)
        except OSError:
            if not code_dir.exists():
                raise
            # A host sharing this workdir renamed its copy into place first.
            return staged_already(code_dir, manifest)
        placed = True
    finally:
        if not placed:
            shutil.rmtree(str(stage_dir), ignore_errors=True)
    emit({"staged": len(manifest)})
    return 0


def list_files(directory: Path) -> int:
    found = {}
    for pattern in SENT:
        matches: list[list[object]] = []
        for path in sorted(directory.glob(pattern)) if directory.is_dir() else ():
            if len(matches) >= 1000:
                break
            try:
                info = path.lstat()
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                relative = path.relative_to(directory).as_posix()
                matches.append([relative, info.st_size, info.st_mtime])
        found[pattern] = matches
    emit({"files": found})
    return 0


def staged_already(code_dir: Path, manifest: dict[str, Any]) -> int:
    """A host sharing the workdir staged the run's code: it must be the same code."""
    for relative, (digest, _) in sorted(manifest.items()):
        try:
            same = sha256_of(code_dir / relative) == digest
        except OSError:
            same = False
        if not same:
            emit({"error": f"{code_dir} exists already, with other code ({relative})"})
            return 1
    emit({"staged": len(manifest), "shared": True})
    return 0


def write(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, SENT)
    emit({"written": len(SENT)})
    return 0


def free_port(wanted: int) -> int:
    with socket.socket() as probe:
        # As torchrun's store binds: connections of a run that just ended (TIME_WAIT) do not
        # keep the port, a listener does.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", wanted))
        except OSError as error:
            emit({"error": f"port {wanted} is not free on this host: {error}"})
            return 1
        emit({"port": probe.getsockname()[1]})
    return 0


class Followed:
    __slots__ = ("offset", "size", "skipping", "still_since")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.skipping = False
        self.size = -1
        self.still_since = 0.0


def followed_files(run_dir: Path) -> Iterator[str]:
    for top in ("events", "logs", "node"):
        for directory, _, names in os.walk(run_dir / top):
            for name in names:
                relative = Path(directory, name).relative_to(run_dir).as_posix()
                if FOLLOWED.match(relative):
                    yield relative


def read_new(run_dir: Path, relative: str, state: Followed) -> bool:
    """Sends the file's new whole lines, up to :data:`READ_CHUNK`; whether more is waiting."""
    try:
        with (run_dir / relative).open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < state.offset:
                # Truncated or replaced: start again rather than read past the end forever.
                state.offset = 0
                state.skipping = False
            if size == state.offset:
                return False
            now = time.monotonic()
            if size != state.size:
                state.size, state.still_since = size, now
            handle.seek(state.offset)
            data = handle.read(READ_CHUNK)
    except OSError:
        return False
    start = 0
    while True:
        newline = data.find(b"\n", start)
        if newline < 0:
            break
        line = data[start:newline]
        state.offset += newline + 1 - start
        start = newline + 1
        if state.skipping:
            state.skipping = False
            continue
        emit_line(relative, state.offset, line, cut=False)
    rest = data[start:]
    if len(rest) > MAX_LINE and not state.skipping:
        # A line longer than any we show: send its head now, skip the rest up to the newline.
        state.offset += len(rest)
        state.skipping = True
        emit_line(relative, state.offset, rest[:MAX_LINE], cut=True)
    elif state.skipping:
        state.offset += len(rest)
    elif rest and state.offset + len(rest) == size and now - state.still_since >= SETTLED_S:
        # A last line without a newline (torchrun's error.json has none): once the file has
        # stopped growing, it is complete.
        state.offset += len(rest)
        emit_line(relative, state.offset, rest, cut=False)
    return len(data) == READ_CHUNK


def emit_line(relative: str, offset: int, line: bytes, cut: bool) -> None:
    document: dict[str, Any] = {
        "k": "line",
        "f": relative,
        "o": offset,
        "t": line[:MAX_LINE].decode("utf-8", "replace"),
    }
    if cut or len(line) > MAX_LINE:
        document["cut"] = True
    emit(document)


class Sampler:
    """The run's processes on this host (CPU, RSS) and, where there are any, its GPUs."""

    GPU_QUERY = (
        "index,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,utilization.gpu,"
        "utilization.memory,memory.used,memory.total,pstate,ecc.errors.uncorrected.volatile.total"
    )

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.ticks: dict[int, int] = {}
        self.last = time.monotonic()
        self.tick_hz = os.sysconf("SC_CLK_TCK")
        self.page_mib = os.sysconf("SC_PAGE_SIZE") / 2**20
        self.smi = shutil.which("nvidia-smi")

    def sample(self) -> dict[str, Any]:
        now = time.monotonic()
        elapsed = max(now - self.last, 1e-6)
        self.last = now
        cpu = rss = 0.0
        count = 0
        ticks = {}
        processes = run_processes(self.run_dir)
        living = {attempt for _, _, attempt, _, _ in processes}
        groups = {str(attempt): attempt in living for attempt in attempts(self.run_dir)}
        current = max(living, default=0)
        own = {pid: rank for rank, (pid, _, _) in rank_processes(processes, current).items()}
        ranks: dict[str, dict[str, Any]] = {}
        for pid, _, attempt, fields, _ in processes:
            if attempt != current:
                continue
            try:
                used = int(fields[11]) + int(fields[12])
                rss += int(fields[21]) * self.page_mib
            except (IndexError, ValueError):
                continue
            count += 1
            ticks[pid] = used
            share = (used - self.ticks.get(pid, used)) / self.tick_hz / elapsed * 100
            cpu += share
            if pid in own:
                ranks[str(own[pid])] = {"state": fields[0], "cpu_pct": round(share, 1)}
        self.ticks = ticks
        sample: dict[str, Any] = {
            "procs": count,
            "cpu_pct": round(cpu, 1),
            "rss_mib": round(rss, 1),
            "ranks": ranks,
        }
        if self.smi:
            sample["gpus"] = self.gpus(self.smi)
        return {"k": "hb", "time": time.time(), "groups": groups, "sample": sample}

    def gpus(self, smi: str) -> list[dict[str, str]]:
        try:
            output = subprocess.run(
                [smi, "--query-gpu=" + self.GPU_QUERY, "--format=csv,noheader,nounits"],
                capture_output=True,
                timeout=2,
                check=False,
            ).stdout.decode("utf-8", "replace")
        except (OSError, subprocess.TimeoutExpired):
            return []
        names = self.GPU_QUERY.split(",")
        rows = []
        for line in output.splitlines()[:64]:
            cells = [cell.strip() for cell in line.split(",")]
            if len(cells) == len(names):
                rows.append(dict(zip(names, cells)))  # noqa: B905 (Python 3.8 hosts)
        return rows


def follow(run_dir: Path) -> int:
    states = {path: Followed(int(offset)) for path, offset in (SENT or {}).items()}
    sampler = Sampler(run_dir)
    next_beat = 0.0
    while True:
        behind = False
        for relative in followed_files(run_dir):
            state = states.get(relative)
            if state is None:
                state = states[relative] = Followed(0)
            behind = read_new(run_dir, relative, state) or behind
        if time.monotonic() >= next_beat:
            # A heartbeat that is not behind says every line written before it was sent.
            emit({**sampler.sample(), "behind": behind})
            next_beat = time.monotonic() + HEARTBEAT_S
        sys.stdout.flush()
        time.sleep(POLL_S)


def main(argv: list[str]) -> int:
    if not argv:
        emit({"error": "no command"})
        return 2
    command, args = argv[0], argv[1:]
    if command == "start":
        return start(Path(args[0]), Path(args[1]), args[2], args[3], args[4:])
    if command == "status":
        return status(Path(args[0]))
    if command == "signal":
        return send_signal(Path(args[0]), args[1])
    if command == "wait":
        return wait_gone(Path(args[0]), float(args[1]))
    if command == "control":
        return control(Path(args[0]), args[1])
    if command == "dump":
        return dump(Path(args[0]), float(args[1]))
    if command == "have":
        return have(Path(args[0]))
    if command == "put":
        return put(Path(args[0]))
    if command == "stage":
        return stage(Path(args[0]), Path(args[1]))
    if command == "write":
        return write(Path(args[0]))
    if command == "list-files":
        return list_files(Path(args[0]))
    if command == "free-port":
        return free_port(int(args[0]) if args else 0)
    if command == "follow":
        try:
            return follow(Path(args[0]))
        except (BrokenPipeError, KeyboardInterrupt):
            return 0
    emit({"error": f"unknown command {command!r}"})
    return 2


SENT: Any = None
"""A document too large for argv, where Linux caps one argument at 128 KiB: the head sends it
in this source, assigned below (``ddptui.run.agent_client.agent_source``)."""

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
