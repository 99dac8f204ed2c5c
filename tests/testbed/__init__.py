"""A real multi-host cluster on one machine, and a fast in-process SSH server, for tests.

Hosts are Linux network + UTS namespaces on a bridge, each running OpenSSH sshd; see
:class:`TestBed`. Faults (cut links, frozen hosts, rotated keys…) are in :mod:`.faults`.
"""

from __future__ import annotations

from tests.testbed.cluster import TestBed, TestBedBusy
from tests.testbed.faults import (
    cpu_throttled,
    cut_head_link,
    cut_link,
    firewall_port,
    freeze,
    frozen,
    install_double,
    install_module,
    kill_whole,
    link_cut,
    log_kernel,
    occupy_port,
    open_firewall,
    remove_double,
    restore,
    restore_host_key,
    restore_link,
    rotate_host_key,
    set_name_resolution,
    sshd_stopped,
    start_sshd,
    stop_sshd,
    thaw,
)
from tests.testbed.host import NameResolution, PortHolder, TestHost, run_on
from tests.testbed.localssh import LocalSshServer
from tests.testbed.network import TestBedError

__all__ = [
    "LocalSshServer",
    "NameResolution",
    "PortHolder",
    "TestBed",
    "TestBedBusy",
    "TestBedError",
    "TestHost",
    "cpu_throttled",
    "cut_head_link",
    "cut_link",
    "firewall_port",
    "freeze",
    "frozen",
    "install_double",
    "install_module",
    "kill_whole",
    "link_cut",
    "log_kernel",
    "occupy_port",
    "open_firewall",
    "remove_double",
    "restore",
    "restore_host_key",
    "restore_link",
    "rotate_host_key",
    "run_on",
    "set_name_resolution",
    "sshd_stopped",
    "start_sshd",
    "stop_sshd",
    "thaw",
]
