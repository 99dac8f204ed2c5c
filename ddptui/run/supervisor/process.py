"""The supervisor as a process: started detached, holding the run's lock for its whole life,
serving its socket until the run has ended and nothing more is asked of it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import io
import logging
import logging.handlers
import os
import resource
import signal
import sys
import traceback
from pathlib import Path
from typing import IO

from ddptui.atomic import open_file, write_atomic
from ddptui.config import load_config
from ddptui.errors import DdptuiError
from ddptui.layout import RunFiles
from ddptui.run import protocol
from ddptui.run.protocol import BUSY
from ddptui.run.standby import MAX_TOLD_BYTES, STANDBY, told
from ddptui.run.store import RunStore
from ddptui.run.supervisor.jobs import Job, Launch, Resume
from ddptui.run.supervisor.loop import Supervisor

log = logging.getLogger("ddptui.supervisor")


async def serve(supervisor: Supervisor, first: Job | None) -> None:
    """Serve the run's socket and do its jobs until the supervisor's work is over, or SIGTERM
    (a shutdown, `ddptui demo` ending): then it stops supervising cleanly; the run goes on, and
    the next command that finds it live starts another supervisor."""
    files, record = supervisor.files, supervisor.record
    with protocol.socket_address(files.socket) as address:
        server = await asyncio.start_unix_server(
            supervisor.audience.connected, path=address, limit=protocol.MAX_MESSAGE_BYTES
        )
    files.socket.chmod(0o600)
    log.info("supervising run %s (%s), pid %d", record.id, record.state.value, os.getpid())
    finished = False
    watching = asyncio.create_task(supervisor.watch_backend())
    sweeping = asyncio.create_task(supervisor.sweep_leftovers())
    try:
        supervisor.first_jobs(first)
        work = asyncio.create_task(supervisor.work())
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, work.cancel)
        try:
            await work
            finished = True
        except asyncio.CancelledError:
            log.info("SIGTERM: no longer supervising run %s", record.id)
    finally:
        watching.cancel()
        sweeping.cancel()
        server.close()
        # Settling needs the judge loop: after SIGTERM or a crash the next supervisor takes
        # the lines up from the journal's offsets instead.
        await supervisor.following.end(settle=finished)
        await supervisor.audience.close()
        supervisor.journal.close()
        with contextlib.suppress(OSError):
            files.socket.unlink()
        log.info(
            "run %s %s; supervisor exits (peak RSS %d MiB)",
            record.id,
            supervisor.record.state.value,
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddptui.run.supervisor")
    parser.add_argument("root", type=Path)
    parser.add_argument("run", help=f"the run's id; {STANDBY}: read it and the options on stdin")
    parser.add_argument("--launch", action="store_true", help="launch the recorded run")
    parser.add_argument("--resume", action="store_true", help="resume the ended run")
    parser.add_argument("--debug", action="store_true", help="with torch's debug environment")
    parser.add_argument("--foreground", action="store_true", help="do not fork (tests)")
    args = parser.parse_args(argv)
    if args.run == STANDBY:
        # Started ahead of its run (ddptui.run.standby), everything imported: told the run
        # once it is recorded, or nothing when the launch did not go ahead.
        words = told(sys.stdin.readline(MAX_TOLD_BYTES))
        if words is None:
            return 0
        args = parser.parse_args(words)
    store = RunStore(args.root)
    files = store.files(args.run)
    if not args.foreground and os.fork():
        # The starter waits for this first process only; the supervisor goes on as an orphan,
        # so it leaves no zombie behind in a long-lived console.
        return 0
    lock = _take_lock(files)
    if lock is None:
        return BUSY
    _log_to(files)
    write_atomic(files.supervisor_pid, f"{os.getpid()}\n")
    # A closed terminal or a Ctrl-C in the shell that started it must not end it.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        record = store.load(args.run)
        config = load_config(files.hosts)
        first: Job | None = None
        if args.launch:
            first = Launch(debug=args.debug)
        elif args.resume:
            first = Resume(debug=args.debug)
        asyncio.run(serve(Supervisor(store, record, config), first))
    except DdptuiError as error:
        log.error("cannot supervise run %s: %s", args.run, error)
        return 2
    except Exception:
        log.critical("supervisor crashed:\n%s", traceback.format_exc())
        return 1
    finally:
        with contextlib.suppress(OSError):
            files.supervisor_pid.unlink()
    return 0


def _take_lock(files: RunFiles) -> IO[bytes] | None:
    """The run's supervisor lock, held until this process ends (the kernel lets go of it when
    the process dies, so a killed supervisor never leaves a stale lock); None if it is held."""
    handle = os.fdopen(open_file(files.supervisor_lock, os.O_WRONLY | os.O_APPEND), "ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


class _Log(logging.handlers.RotatingFileHandler):
    """The supervisor's log, made with the store's file mode whatever the umask (and anew so
    at each rollover)."""

    def _open(self) -> io.TextIOWrapper:
        fd = open_file(Path(self.baseFilename), os.O_WRONLY | os.O_APPEND)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)


def _log_to(files: RunFiles) -> None:
    handler = _Log(files.supervisor_log, maxBytes=4 * 1024 * 1024, backupCount=1, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    # asyncssh logs every channel at INFO: the log would be mostly that.
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
