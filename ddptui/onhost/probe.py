"""ddptui host probe: prints one JSON document of facts about the machine it runs on.

Sent on stdin to each host's configured Python (``python - ARGS…``) with the modules of its
sections (``probe_*``) as one program (:func:`ddptui.remote.programs.probe_program`), so it
must run on Python 3.8+ with the standard library alone, and it must never raise: a section
that fails is recorded as ``{"error": "…"}`` and the rest still report. Annotations are never
evaluated (``from __future__ import annotations``), which keeps newer typing syntax safe.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ddptui.onhost.probe_gpus import gpus_section
from ddptui.onhost.probe_kernel import kernel_log_section
from ddptui.onhost.probe_network import Lookup, host_section, interfaces_section, port_section
from ddptui.onhost.probe_section import section
from ddptui.onhost.probe_system import packages_section, python_section, system_section
from ddptui.onhost.probe_torch import start_torch, torch_section
from ddptui.onhost.probe_torch_cache import (
    agrees_with_gpus,
    cached_torch,
    keep_torch,
    torch_fingerprint,
)
from ddptui.onhost.probe_workdir import disk_section, identity_section, workdir_section

PROBE_VERSION = 1
"""The document's format: :mod:`ddptui.probe` reads this number and no other."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ddptui-probe")
    parser.add_argument("--workdir", default="~")
    parser.add_argument("--master-port", type=int, default=None)
    parser.add_argument("--master-addr", default=None)
    parser.add_argument("--torch-timeout", type=float, default=20.0)
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    deadline = time.monotonic() + args.torch_timeout
    fingerprint = section(torch_fingerprint)
    kept = cached_torch(args.workdir, fingerprint)
    torch_child = section(start_torch) if kept is None else None
    master = None if args.master_addr is None else section(lambda: Lookup(args.master_addr))
    doc = {
        "probe_version": PROBE_VERSION,
        "host": section(host_section),
        "interfaces": section(interfaces_section),
        "python": section(python_section),
        "gpus": section(gpus_section),
        "kernel_log": section(kernel_log_section),
        "disk": section(lambda: disk_section(args.workdir)),
        "workdir": section(lambda: workdir_section(args.workdir)),
        # After the workdir's section, which reports the workdir as it was found: this one
        # creates it where it is missing.
        "workdir_id": section(lambda: identity_section(args.workdir)),
        "system": section(system_section),
        "packages": section(packages_section),
        "port": None
        if args.master_port is None
        else section(lambda: port_section(args.master_port)),
    }
    if isinstance(master, Lookup):
        doc["master"] = master.section()
    elif master is not None:
        # The thread did not start; the section still names what was to be resolved.
        doc["master"] = {"name": args.master_addr, **master}
    if kept is not None and not agrees_with_gpus(kept, doc["gpus"]):
        kept = None
        deadline = time.monotonic() + args.torch_timeout
        torch_child = section(start_torch)
    if kept is not None:
        doc["torch"] = {**kept, "cached": True}
    elif isinstance(torch_child, dict):
        doc["torch"] = {"status": "error", "detail": torch_child["error"]}
    elif torch_child is not None:
        doc["torch"] = section(lambda: torch_section(torch_child, deadline))
        keep_torch(args.workdir, fingerprint, doc["torch"])
    doc["time"] = time.time()
    sys.stdout.write(json.dumps(doc, default=str) + "\n")
    sys.stdout.flush()
