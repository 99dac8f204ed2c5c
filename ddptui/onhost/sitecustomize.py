"""The stack handler every rank loads: written as ``sitecustomize.py`` first on each rank's
``PYTHONPATH`` (:func:`ddptui.onhost.processes.stack_site`), so any Python script (the trainer
or the user's own) registers it before its first line runs. On the agent's signal it writes
the rank's stacks (all threads) with :mod:`faulthandler`. It also installs the events of the
frameworks a script may train with (:mod:`ddptui.onhost.instrument`, written beside it as
``ddptui_instrument.py``) unless ``DDPTUI_INSTRUMENT`` is ``0``. It must never break the
process it runs in, and a sitecustomize the user already has runs after it, as if this one
were not there.

Never imported by ddptui: its source is what is written.
"""

import os
import sys


def _ddptui_rank_process() -> bool:
    """Whether this is a rank's own process: not torchrun, nor what a rank starts (its
    workers inherit RANK)."""
    rank = os.environ.get("RANK")
    if rank is None:
        return False
    try:
        with open("/proc/%d/environ" % os.getppid(), "rb") as parent:
            return ("RANK=" + rank).encode() not in parent.read().split(b"\0")
    except OSError:
        return True


def _ddptui_stack_handler() -> None:
    import faulthandler
    import json
    import signal

    directory = os.environ.get("DDPTUI_STACKS_DIR")
    if not directory or not hasattr(signal, "SIGRTMIN"):
        return
    # A real-time signal few programs use: its default action ends the process, so the agent
    # sends it only to a process whose ready file below says this handler is in place.
    signum = signal.SIGRTMIN + 6
    pid = os.getpid()
    with open("/proc/self/stat") as stat:
        started = stat.read().rpartition(")")[2].split()[19]
    # At most 0644 whatever umask the rank runs with (the user's, 002 on many clusters): no one
    # else may write what the agent reads back. The umask only takes bits away from the mode.
    flags = os.O_WRONLY | os.O_CREAT
    stacks = os.fdopen(
        os.open(os.path.join(directory, "%d.txt" % pid), flags | os.O_APPEND, 0o644), "ab", 0
    )
    # Ignored beneath the handler: the interpreter's exit restores the disposition it found,
    # and a rank that lingers in native teardown after that (gloo's threads) must not die of
    # a dump asked just then.
    signal.signal(signum, signal.SIG_IGN)
    faulthandler.register(signum, file=stacks, all_threads=True, chain=False)
    ready = os.path.join(directory, "%d.ready" % pid)
    with os.fdopen(os.open(ready + ".tmp", flags | os.O_TRUNC, 0o644), "w") as out:
        json.dump({"signal": int(signum), "started": started}, out)
    os.replace(ready + ".tmp", ready)


def _ddptui_next_sitecustomize() -> None:
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


def _ddptui_instrument() -> None:
    if os.environ.get("DDPTUI_INSTRUMENT", "1") == "0" or not os.environ.get("DDPTUI_RUN_DIR"):
        return
    import ddptui_instrument  # type: ignore[import-not-found]

    ddptui_instrument.install()


if _ddptui_rank_process():
    try:
        _ddptui_stack_handler()
    except Exception:
        pass
    try:
        _ddptui_instrument()
    except Exception as error:
        sys.stderr.write("ddptui: no framework events from this rank (%s)\n" % error)
_ddptui_next_sitecustomize()
