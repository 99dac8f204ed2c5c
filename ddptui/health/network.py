"""Networking: the socket interface per host, the loopback-hostname trap, the master port."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Sequence

from ddptui.config.model import AUTO, Config, HostConfig
from ddptui.facts import NA, HostFacts, Interface, PortFacts
from ddptui.health.findings import Code, Finding, HostCheck, Severity


def choose_socket_ifname(host_facts: HostFacts, master_address: str) -> str | None:
    """The interface gloo/NCCL should use on this host to reach node 0 at ``master_address``.

    The interface holding that address (node 0 itself), else the one whose subnet contains it,
    the most specific subnet winning. ``None`` when no subnet contains it, when the host did
    not report its interfaces, or when ``master_address`` is a name rather than an IP address.
    """
    try:
        target = ipaddress.ip_address(master_address)
    except ValueError:
        return None
    if host_facts.interfaces is NA:
        return None
    best: tuple[int, str] | None = None
    for interface in host_facts.interfaces:
        for network in interface.ipv4:
            if network.ip == target:
                return interface.name
            if target in network.network and (best is None or network.network.prefixlen > best[0]):
                best = (network.network.prefixlen, interface.name)
    return None if best is None else best[1]


def network_findings(
    config: Config, probed: Sequence[tuple[HostConfig, HostFacts]]
) -> Iterator[Finding]:
    master = config.head.address
    for host, facts in probed:
        chosen = choose_socket_ifname(facts, master)
        if host.socket_ifname == AUTO:
            yield from _auto_ifname(host, facts, master, chosen)
        else:
            yield from _configured_ifname(host, facts, master, chosen)
        has_ifname = host.socket_ifname != AUTO or chosen is not None
        yield from _hostname_findings(host, facts, master, has_ifname)


def port_findings(config: Config, checks: Sequence[HostCheck]) -> Iterator[Finding]:
    head = config.head
    for check in checks:
        facts = check.facts
        if check.host.name == head.name and facts is not None and facts.port is not None:
            yield from _bind_findings(head, facts.port)
        if check.master_port_reachable is False:
            yield _unreachable_port(config, check.host)


def _bind_findings(head: HostConfig, port: PortFacts) -> Iterator[Finding]:
    if port.in_use is True:
        yield Finding(
            Code.MASTER_PORT_IN_USE,
            Severity.ERROR,
            head.name,
            f"port {port.port} is already in use on {head.name} (node 0), "
            "so torchrun cannot start its rendezvous store there",
            f"stop what listens there (see: ss -ltnp 'sport = :{port.port}'), "
            'choose another cluster.master_port, or set master_port = "auto"',
        )
    elif port.in_use is NA:
        yield Finding(
            Code.MASTER_PORT_UNUSABLE,
            Severity.ERROR,
            head.name,
            f"{head.name} (node 0) cannot listen on port {port.port}: "
            f"{port.detail or 'unknown error'}",
            'choose a port above 1024 that is free on node 0, or master_port = "auto"',
        )


def _unreachable_port(config: Config, worker: HostConfig) -> Finding:
    head = config.head
    port = config.cluster.master_port
    where = f"{head.address}:{port}" if port != AUTO else f"{head.address} (test port)"
    return Finding(
        Code.MASTER_PORT_UNREACHABLE,
        Severity.ERROR,
        worker.name,
        f"{worker.name} could not open a TCP connection to node 0 at {where}",
        f"allow incoming TCP on {head.name}'s firewall (e.g. sudo ufw allow from "
        f"{worker.address}), and check {head.address} is node 0's address as "
        f"{worker.name} sees it; gloo and NCCL also open other ports between hosts",
    )


def _auto_ifname(
    host: HostConfig, facts: HostFacts, master: str, chosen: str | None
) -> Iterator[Finding]:
    if facts.interfaces is NA:
        return
    if chosen is not None:
        yield Finding(
            Code.SOCKET_IFNAME_CHOSEN,
            Severity.INFO,
            host.name,
            f"{host.name} will use {_describe(facts.interfaces, chosen)} to reach node 0 at "
            f"{master} (NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME)",
            f"set socket_ifname for {host.name} to override the choice",
        )
        return
    yield Finding(
        Code.SOCKET_IFNAME_UNDETERMINED,
        Severity.WARNING,
        host.name,
        f"no interface on {host.name} is on node 0's subnet ({_target(master)}), so ddptui cannot "
        "choose the interface for gloo/NCCL traffic",
        f"set socket_ifname for {host.name} to the interface that routes to node 0; "
        f"it has: {_listing(facts.interfaces)}",
    )


def _configured_ifname(
    host: HostConfig, facts: HostFacts, master: str, chosen: str | None
) -> Iterator[Finding]:
    if facts.interfaces is NA:
        return
    names = {interface.name for interface in facts.interfaces}
    # NCCL's list syntax: "=eth0" means exactly eth0, "^docker" excludes; gloo wants names.
    wanted = [name.strip().lstrip("=") for name in host.socket_ifname.split(",")]
    wanted = [name for name in wanted if name and not name.startswith("^")]
    missing = [name for name in wanted if name not in names]
    if missing:
        yield Finding(
            Code.SOCKET_IFNAME_MISSING,
            Severity.ERROR,
            host.name,
            f'socket_ifname = "{host.socket_ifname}" but {host.name} has no interface '
            f"{', '.join(missing)}",
            f"set socket_ifname for {host.name} to one it has ({_listing(facts.interfaces)}), "
            'or to "auto"',
        )
    elif chosen is not None and chosen not in wanted:
        yield Finding(
            Code.SOCKET_IFNAME_OFF_SUBNET,
            Severity.WARNING,
            host.name,
            f'socket_ifname = "{host.socket_ifname}" on {host.name} is not on node 0\'s subnet, '
            f"but {_describe(facts.interfaces, chosen)} is",
            f'use socket_ifname = "{chosen}" (or "auto") unless traffic is routed on purpose',
        )


def _hostname_findings(
    host: HostConfig, facts: HostFacts, master: str, has_ifname: bool
) -> Iterator[Finding]:
    hostname = facts.hostname if facts.hostname is not NA else host.name
    # One machine standing in for the cluster (the demo) legitimately uses loopback.
    if _is_loopback(master):
        return
    severity = Severity.WARNING if has_ifname else Severity.ERROR
    fix = (
        f"map {hostname} to the host's real address ({host.address}) in /etc/hosts, "
        f"or set socket_ifname for {host.name}"
    )
    if facts.resolve_error:
        trouble = f"does not resolve on {host.name} ({facts.resolve_error})"
        consequence = "so gloo cannot find its own address"
        code = Code.HOSTNAME_UNRESOLVABLE
    elif facts.loopback_addresses:
        addresses = ", ".join(str(address) for address in facts.loopback_addresses)
        trouble = f"resolves to {addresses} on {host.name}"
        consequence = "so gloo/NCCL peers will try to connect to loopback"
        code = Code.HOSTNAME_LOOPBACK
    else:
        return
    if has_ifname:
        consequence = (
            "harmless for ddptui runs (they set the socket interface), not for other tools"
        )
    yield Finding(code, severity, host.name, f"hostname {hostname} {trouble}, {consequence}", fix)


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def _target(master: str) -> str:
    try:
        ipaddress.ip_address(master)
    except ValueError:
        return f"{master} is a name, not an address"
    return master


def _describe(interfaces: Sequence[Interface], name: str) -> str:
    for interface in interfaces:
        if interface.name == name and interface.ipv4:
            return f"{name} ({', '.join(str(network) for network in interface.ipv4)})"
    return name


def _listing(interfaces: Sequence[Interface]) -> str:
    return ", ".join(_describe(interfaces, interface.name) for interface in interfaces)
