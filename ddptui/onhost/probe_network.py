"""The probe's network sections: what the hostname resolves to, the interfaces and their IPv4
addresses, what node 0's address resolves to here, and whether node 0's port is free."""

from __future__ import annotations

import errno
import json
import socket
import struct
import subprocess
import threading
import time
from typing import Any

from ddptui.onhost.probe_section import COMMAND_TIMEOUT_S, describe

# getaddrinfo has no timeout of its own: with an unreachable DNS server it waits for the
# resolver's timeout × attempts × servers (often 10-30 s) before failing.
RESOLVE_TIMEOUT_S = 5.0
SIOCGIFADDR = 0x8915
SIOCGIFNETMASK = 0x891B


def unique_addresses(infos: list[tuple[Any, ...]]) -> list[str]:
    """The addresses of a ``getaddrinfo`` answer, each once, in the resolver's order."""
    addresses: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in addresses:
            addresses.append(address)
    return addresses


def host_section() -> dict[str, Any]:
    hostname = socket.gethostname()
    result: dict[str, Any] = {"hostname": hostname, "fqdn": None, "addresses": []}
    try:
        # AI_CANONNAME gives the FQDN from the same lookup: getfqdn()'s reverse lookup can
        # stall for seconds on a host without a reachable DNS server.
        infos = socket.getaddrinfo(hostname, None, 0, socket.SOCK_STREAM, 0, socket.AI_CANONNAME)
    except OSError as exc:
        result["resolve_error"] = describe(exc)
        return result
    result["fqdn"] = infos[0][3] or hostname
    result["addresses"] = unique_addresses(infos)
    return result


class Lookup:
    """``getaddrinfo(name)`` in a daemon thread, started early and collected with a deadline.

    A daemon thread can be abandoned when the deadline passes, so a stalled resolver costs the
    probe at most ``RESOLVE_TIMEOUT_S`` and never keeps it from exiting.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.deadline = time.monotonic() + RESOLVE_TIMEOUT_S
        self.result: dict[str, Any] = {"name": name, "error": "the lookup did not finish"}
        self.thread = threading.Thread(target=self.resolve, daemon=True)
        self.thread.start()

    def resolve(self) -> None:
        try:
            # As torchrun's store client looks node 0 up: any family, in the resolver's order.
            infos = socket.getaddrinfo(self.name, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
        except Exception as exc:
            self.result = {"name": self.name, "error": describe(exc)}
            return
        self.result = {"name": self.name, "addresses": unique_addresses(infos)}

    def section(self) -> dict[str, Any]:
        self.thread.join(max(0.0, self.deadline - time.monotonic()))
        if self.thread.is_alive():
            return {"name": self.name, "error": f"timed out after {RESOLVE_TIMEOUT_S:g} s"}
        return self.result


def interfaces_section() -> dict[str, Any]:
    try:
        found = subprocess.run(
            ["ip", "-j", "-4", "addr", "show"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            timeout=COMMAND_TIMEOUT_S,
            check=True,
        )
        links = json.loads(found.stdout.decode("utf-8", "replace"))
    except (OSError, ValueError, subprocess.SubprocessError):
        return {"source": "ioctl", "items": interfaces_from_ioctl()}
    items: list[dict[str, Any]] = []
    for link in links:
        addresses = [
            {"address": info["local"], "prefixlen": info["prefixlen"]}
            for info in link.get("addr_info", [])
            if info.get("family") == "inet"
        ]
        items.append({"name": link["ifname"], "ipv4": addresses})
    return {"source": "ip", "items": items}


def interfaces_from_ioctl() -> list[dict[str, Any]]:
    """Older hosts without ``ip -j``: one (primary) IPv4 address per interface."""
    import fcntl

    items: list[dict[str, Any]] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                address = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)[20:24]
                netmask = fcntl.ioctl(sock.fileno(), SIOCGIFNETMASK, request)[20:24]
            except OSError:
                items.append({"name": name, "ipv4": []})
                continue
            prefixlen = bin(struct.unpack("!I", netmask)[0]).count("1")
            ipv4 = [{"address": socket.inet_ntoa(address), "prefixlen": prefixlen}]
            items.append({"name": name, "ipv4": ipv4})
    return items


def port_section(port: int) -> dict[str, Any]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As torchrun's store does, so a port lingering in TIME_WAIT is not reported busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return {"port": port, "in_use": True}
            return {"port": port, "in_use": None, "detail": describe(exc)}
    return {"port": port, "in_use": False}
