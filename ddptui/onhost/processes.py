"""A run's processes on this host: start an attempt detached, find its processes, signal them,
wait for them to be gone; the trainer's control files; a free port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from ddptui.onhost.common import (
    ATTEMPT_FILE,
    ATTEMPT_MARK,
    PYCACHE,
    RUN_MARK,
    STACKS_MARK,
    WAIT_POLL_S,
    emit,
    make_dirs,
    open_file,
    source_of,
    write_atomic,
)

# The wrapper survives SIGTERM/SIGINT sent to its group (the trap), so it can record how the
# command ended; the command itself gets the default dispositions back at exec. Its exit file
# is made 0644 (the umask the command ran with is the user's), its console by ``_begin`` first.
WRAPPER = """\
trap : TERM INT HUP
out=$1; exit_file=$2; shift 2
"$@" >"$out" 2>&1 </dev/null
status=$?
umask 022
printf '%s\\n' "$status" >"$exit_file.tmp" && mv "$exit_file.tmp" "$exit_file"
exit "$status"
"""


def start(
    run_dir: Path, code_dir: Path, attempt: str, env: Mapping[str, str], command: list[str]
) -> int:
    """Start ``command`` detached (a session of its own) with ``env`` over this process's
    environment, and answer its process group: how an SSH host's node starts."""
    child = _begin(run_dir, code_dir, attempt, env, command, detached=True)
    if child is None:
        return 1
    emit({"pgid": child.pid})
    return 0


def run(run_dir: Path, code_dir: Path, attempt: str, command: list[str]) -> int:
    """Start ``command`` as :func:`start` does, but in this process's session, and wait for it:
    how a Slurm step runs a node, so the step lives as long as torchrun and Slurm's signals
    reach it. Exits with the command's status; the signals that end the command do not end
    this process first (it waits for the command and records its status itself)."""
    child: subprocess.Popen[bytes] | None = None
    early: list[int] = []

    def held(number: int, _frame: object) -> None:
        # A signal for the whole step that came before the command existed would otherwise be
        # lost: it is passed on once the command runs. Later ones reach it through its group.
        if child is None:
            early.append(number)

    for step_signal in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # A handler, not SIG_IGN: the command gets the default disposition back at exec.
        signal.signal(step_signal, held)
    # The batch script exported the run's environment: nothing to add.
    child = _begin(run_dir, code_dir, attempt, {}, command, detached=False)
    if child is None:
        return 1
    for passed_on in early:
        child.send_signal(passed_on)
    status = child.wait()
    code = status if status >= 0 else 128 - status
    write_atomic(_attempt_file(run_dir, attempt, "exit"), f"{code}\n")
    return code


def _begin(
    run_dir: Path,
    code_dir: Path,
    attempt: str,
    env: Mapping[str, str],
    command: list[str],
    *,
    detached: bool,
) -> subprocess.Popen[bytes] | None:
    pgid_file = _attempt_file(run_dir, attempt, "pgid")
    if pgid_file.exists():
        emit({"error": f"attempt {attempt} was already started on this host"})
        return None
    for made in (pgid_file.parent, *(run_dir / name for name in RANKS_WRITE)):
        make_dirs(made)
    env = {**os.environ, **env}
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
    out = _attempt_file(run_dir, attempt, "out")
    exit_file = _attempt_file(run_dir, attempt, "exit")
    # Started detached, the command outlives this process, so a shell waits for it and
    # records how it ended; in the foreground, this process does (see run).
    wrapper = ["sh", "-c", WRAPPER, "ddptui-node", str(out), str(exit_file)] if detached else []
    try:
        with os.fdopen(open_file(out, os.O_WRONLY | os.O_TRUNC), "wb") as console:
            child = subprocess.Popen(
                [*wrapper, *command],
                cwd=str(code_dir),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL if detached else console,
                stderr=subprocess.STDOUT,
                start_new_session=detached,
            )
    except OSError as error:
        emit({"error": f"cannot start: {error}"})
        if not detached:
            # As the shell records a command it cannot run, so the step's node ends alike.
            write_atomic(out, f"ddptui: cannot start {command[0]}: {error}\n")
            write_atomic(exit_file, "127\n")
        return None
    write_atomic(pgid_file, f"{child.pid}\n")
    return child


RANKS_WRITE = ("events", "control")
"""The run's directories its ranks write in (their events; the trainer's requests): made here
first, with ddptui's mode, rather than by the ranks with the umask they run with."""


def _attempt_file(run_dir: Path, attempt: str, kind: str) -> Path:
    # The host's side of ddptui.layout's node files (that module is not sent to hosts).
    return run_dir / "node" / f"attempt-{attempt}.{kind}"


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
            "ranks": sum(
                1 for _, _, of, _, rank in processes if of == attempt and rank is not None
            ),
        }
    emit({"attempts": report, "time": time.time()})
    return 0


def send_signal(run_dir: Path, name: str) -> int:
    number = getattr(signal, "SIG" + name)
    signalled: dict[int, list[str]] = {}
    for pid, process_name, attempt, fields, _ in run_processes(run_dir):
        # A stopped process keeps SIGTERM pending until it runs again: it gets SIGKILL, which
        # it would get after the grace, at once. Not a SIGCONT: let run, a rank stopped in a
        # collective would leave a flight recorder as its peers' and hide that it was the one.
        stopped = number == signal.SIGTERM and fields[:1] == ["T"]
        try:
            os.kill(pid, signal.SIGKILL if stopped else number)
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


def wait_gone(run_dir: Path, seconds: float, linger: float | None = None) -> int:
    """Return once no process of the run is left, or (with ``linger``) once none of what is
    left has been a rank's for ``linger`` seconds, or after ``seconds``; then as ``status``.

    One process watching on the host instead of the head asking every second: on a loaded
    machine that polling competes with the very shutdown it waits for.
    """
    now = time.monotonic()
    deadline, ranks_gone_at = now + seconds, None
    while now < deadline:
        left = run_processes(run_dir)
        if not left:
            break
        if linger is not None and all(rank is None for *_, rank in left):
            ranks_gone_at = now if ranks_gone_at is None else ranks_gone_at
            if now - ranks_gone_at >= linger:
                break
        else:
            ranks_gone_at = None
        time.sleep(WAIT_POLL_S)
        now = time.monotonic()
    return status(run_dir)


def control(run_dir: Path, name: str) -> int:
    directory = run_dir / "control"
    make_dirs(directory)
    # Anew: a trainer tells a request made for it from one an earlier attempt left.
    (directory / name).unlink(missing_ok=True)
    os.close(open_file(directory / name, os.O_WRONLY))
    emit({"created": name})
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


def stacks_dir(run_dir: Path) -> Path:
    return run_dir / "node" / "stacks"


def stack_site(run_dir: Path) -> Path | None:
    """The directory holding the stack handler (:mod:`ddptui.onhost.sitecustomize`) as
    ``sitecustomize.py`` and the frameworks' events (:mod:`ddptui.onhost.instrument` and
    :mod:`ddptui.onhost.instrument_frameworks`) as ``ddptui_instrument.py`` and
    ``ddptui_instrument_frameworks.py``, put first on every rank's ``PYTHONPATH``; None if it
    cannot be written (the run goes on without stack dumps rather than not at all)."""
    site = stacks_dir(run_dir) / "site"
    try:
        make_dirs(site / PYCACHE)
        write_atomic(site / "ddptui_instrument.py", source_of("ddptui.onhost.instrument"))
        write_atomic(
            site / "ddptui_instrument_frameworks.py",
            source_of("ddptui.onhost.instrument_frameworks"),
        )
        write_atomic(site / "sitecustomize.py", source_of("ddptui.onhost.sitecustomize"))
    except OSError:
        return None
    return site
