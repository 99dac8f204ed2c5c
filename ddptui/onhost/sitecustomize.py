"""The stack handler every rank loads: written as ``sitecustomize.py`` first on each rank's
``PYTHONPATH`` (:func:`ddptui.onhost.processes.stack_site`), so any Python script (the trainer
or the user's own) registers it before its first line runs. On the agent's signal it writes
the rank's stacks (all threads) with :mod:`faulthandler`. It must never break the process it
runs in, and a sitecustomize the user already has runs after it, as if this one were not there.

Never imported by ddptui: its source is what is written.
"""

import os
import sys


def _ddptui_stack_handler() -> None:
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
            if ("RANK=" + rank).encode() in parent.read().split(b"\0"):
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


try:
    _ddptui_stack_handler()
except Exception:
    pass
_ddptui_next_sitecustomize()
