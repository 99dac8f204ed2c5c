"""The node agent: stdlib-only commands run by each host's Python (like the probe).

The head sends this package as one program (:func:`ddptui.remote.programs.agent_program`):
``python - COMMAND ARGS…`` with the program on stdin, and what is too large for argv
(``SENT``, handed to :func:`main`) inside it. It needs only Python ≥ 3.8; annotations are
never evaluated (``from __future__ import annotations``). Every command prints JSON: one
document, or for ``follow`` one per line.

Commands:

- ``start RUN_DIR CODE_DIR ATTEMPT ENV_JSON CMD…``: start CMD detached (its own session and
  process group, stdio from/to files) with cwd CODE_DIR; a small shell wrapper records
  torchrun's exit status in ``node/attempt-N.exit``. Prints ``{"pgid": N}``.
- ``run RUN_DIR CODE_DIR ATTEMPT ENV_JSON CMD…``: the same, in the foreground: waits for CMD
  and exits with its status (a Slurm job's step runs each node so).
- ``status RUN_DIR``: every attempt's processes (found by the ``DDPTUI_RUN_DIR`` and
  ``DDPTUI_ATTEMPT`` every one inherits), whether any lives, how many are ranks' (``RANK``
  set: a rank and what it started), and torchrun's exit status.
- ``wait RUN_DIR SECONDS [LINGER]``: as ``status``, once no process of the run is left, or
  (with LINGER) none of what is left has been a rank's for LINGER seconds, or at the latest
  after SECONDS.
- ``control RUN_DIR NAME``: create ``control/NAME`` (``stop``, ``save`` or ``rescue``) anew for
  the trainer.
- ``signal RUN_DIR SIGNAL``: send SIGNAL to every process of the run; SIGKILL instead of
  SIGTERM to those stopped (SIGSTOP, Ctrl-Z), which could not act on it.
- ``put CACHE_DIR``: write the pieces in ``SENT`` (``[sha256, offset, base64, size or
  null]``; a size ends the content) into the cache; an ended content is verified, then renamed
  into place. Hosts that share the directory may write the same content at once: the same
  bytes at the same offsets.
- ``stage CACHE_DIR CODE_DIR RECORD_PATH``: a launch's one call per host. When the host's cache
  of code contents (by SHA-256) lacks some of ``SENT["manifest"]``'s (path → ``[sha256,
  executable]``), only that: ``{"missing": [...]}`` (the contents it holds are touched: the
  cache keeps what was used in the last :data:`CACHE_DAYS` days). Else the code directory is
  laid out from the cache, each file verified as it is copied, in a staging directory renamed
  into place (the code is all there or not at all; one that is there already, which a host
  sharing this workdir staged, is verified instead), and ``SENT["record"]`` is written to
  RECORD_PATH: ``{"staged": N, "shared": bool, "written": N}``.
- ``write PATH``: write the text in ``SENT`` to PATH, atomically.
- ``list-files DIR``: for each glob in ``SENT`` (relative to DIR), the regular files it
  matches there, ``[path, size, mtime]`` each (at most 1,000 per glob).
- ``free-port [PORT]``: a TCP port that is free on this host now (PORT itself, or an error).
- ``dump RUN_DIR SECONDS``: every rank's Python stacks (all threads) in the latest attempt, from
  ``py-spy dump`` where it is installed and allowed, else from the stack handler
  registered in the rank (signalled only once its ready file says the handler is in place),
  within SECONDS: ``{"attempt": N, "ranks": [{"rank", "pid", "name", "via", "text", "error",
  "note"}], "flight": [[rank, size], ...]}`` (``note``: why py-spy was not used where it is
  installed; ``flight``: the ranks' flight-recorder dumps in ``node/``).
- ``follow RUN_DIR [thin]``: stream new lines of the run's files from the byte offsets in
  ``SENT`` (path → offset), and a heartbeat with process and GPU samples every 2 s, until
  killed; with ``thin``, fast ranks' step events thinned (``thinning.py``).
- ``serve``: says ``{"serving": PID}``, then runs the one-shot commands above, one after
  another, each asked as a line on stdin (``{"args": [COMMAND, ARGS…], "sent": SENT}``) and
  answered with what it prints, then ``{"served": EXIT_STATUS, "failed":
  LAST_TRACEBACK_LINE}``; until stdin ends. A launch keeps
  one per host (:func:`ddptui.run.agent.call.kept_agents`): a command then costs a line each
  way, not a session and a Python start.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from ddptui.onhost.cache import list_files, put, stage, write
from ddptui.onhost.common import emit
from ddptui.onhost.follow import follow
from ddptui.onhost.processes import (
    control,
    free_port,
    run,
    send_signal,
    start,
    status,
    wait_gone,
)
from ddptui.onhost.stacks import dump


def main(argv: list[str], sent: Any = None) -> int:
    """Run the command ``argv`` names; ``sent``: its document too large for argv."""
    if not argv:
        emit({"error": "no command"})
        return 2
    command, args = argv[0], argv[1:]
    if command == "start":
        # The environment comes as the sent document, never in argv: its values may be
        # tokens, and a process's argv is anyone's to read in ps.
        env = sent if isinstance(sent, dict) else {}
        return start(Path(args[0]), Path(args[1]), args[2], env, args[3:])
    if command == "run":
        return run(Path(args[0]), Path(args[1]), args[2], args[3:])
    if command == "status":
        return status(Path(args[0]))
    if command == "signal":
        return send_signal(Path(args[0]), args[1])
    if command == "wait":
        return wait_gone(Path(args[0]), float(args[1]), float(args[2]) if args[2:] else None)
    if command == "control":
        return control(Path(args[0]), args[1])
    if command == "dump":
        return dump(Path(args[0]), float(args[1]))
    if command == "put":
        return put(Path(args[0]), sent)
    if command == "stage":
        return stage(Path(args[0]), Path(args[1]), Path(args[2]), sent)
    if command == "write":
        return write(Path(args[0]), sent)
    if command == "list-files":
        return list_files(Path(args[0]), sent)
    if command == "free-port":
        return free_port(int(args[0]) if args else 0)
    if command == "follow":
        try:
            return follow(Path(args[0]), sent, thin=args[1:2] == ["thin"])
        except (BrokenPipeError, KeyboardInterrupt):
            return 0
    if command == "serve":
        return serve()
    emit({"error": f"unknown command {command!r}"})
    return 2


NOT_SERVED = ("follow", "run", "serve")
"""Commands that hold the process (or its stdin) for as long as they last."""


def serve() -> int:
    emit({"serving": os.getpid()})
    sys.stdout.flush()
    requests = sys.stdin.buffer
    while True:
        line = requests.readline()
        if not line:
            return 0
        failed = ""
        try:
            request = json.loads(line)
            argv = [str(arg) for arg in request["args"]]
            if argv and argv[0] in NOT_SERVED:
                emit({"error": f"{argv[0]} is not served"})
                status = 2
            else:
                status = main(argv, request.get("sent"))
        except Exception:
            # What a one-shot agent's traceback would end with on its stderr.
            status, failed = 1, traceback.format_exc().strip().splitlines()[-1]
        emit({"served": status, "failed": failed})
        sys.stdout.flush()
