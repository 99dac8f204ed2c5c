"""Networking: the socket interface per host, the loopback-hostname trap, node 0's address
as each host resolves it, and the master port."""

from __future__ import annotations

import ipaddress
import json
from collections import Counter
from collections.abc import Iterator, Sequence

from ddptui.config.model import AUTO, Config, HostConfig
from ddptui.health.findings import Code, Finding, HostCheck, Severity
from ddptui.health.resources import (
    choose_socket_ifname,
    is_loopback_name,
    master_target,
    resolved_addresses,
)
from ddptui.health.wording import hosts_list
from ddptui.probe.facts import NA, HostFacts, Interface, IPAddress, PortFacts


def network_findings(
    config: Config, probed: Sequence[tuple[HostConfig, HostFacts]]
) -> Iterator[Finding]:
    master = config.head.address
    known = _known_master_address(probed, master)
    # One machine: gloo/NCCL traffic never leaves it, so what peers would be told to connect
    # to (the hostname's address, the interface) does not matter.
    alone = len(config.ordered_hosts) == 1
    # Every host at a loopback address: one machine standing in for a cluster (the demo), whose
    # ranks rightly meet on loopback whatever the hostname resolves to.
    loopback_cluster = all(is_loopback_name(host.address) for host in config.ordered_hosts)
    for host, facts in probed:
        stranded = _stranded(host, master)
        chosen = None if stranded else choose_socket_ifname(facts, master)
        has_ifname = host.socket_ifname != AUTO or chosen is not None
        is_head = host.name == config.head.name
        resolution = list(_master_findings(host, facts, master, known, is_head, has_ifname))
        if stranded:
            resolution.append(_stranded_worker(config.head, host))
        yield from resolution
        if host.socket_ifname == AUTO:
            # A name that does not resolve (or only to loopback) is why no interface could be
            # chosen; the finding above already says so and how to fix it.
            explained = bool(resolution) or alone
            yield from _auto_ifname(host, facts, master, chosen, explained=explained)
        else:
            yield from _configured_ifname(host, facts, master, chosen)
        if not loopback_cluster:
            yield from _hostname_findings(host, facts, has_ifname, alone=alone)
    yield from _master_mismatch(probed, master)


def port_findings(config: Config, checks: Sequence[HostCheck]) -> Iterator[Finding]:
    head = config.head
    for check in checks:
        facts = check.facts
        if check.host.name == head.name and facts is not None and facts.port is not None:
            yield from _bind_findings(head, facts.port)
        # A worker that cannot resolve node 0's name to node 0 cannot connect to it either;
        # its master_* finding names the cause, which a firewall hint would only obscure.
        if (
            check.master_port_reachable is False
            and not _stranded(check.host, head.address)
            and (facts is None or not _master_unusable(facts, head.address))
        ):
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
    host: HostConfig, facts: HostFacts, master: str, chosen: str | None, *, explained: bool
) -> Iterator[Finding]:
    if facts.interfaces is NA or (chosen is None and explained):
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
        f"no interface on {host.name} is on node 0's subnet ({_target(facts, master)}), "
        "so ddptui cannot choose the interface for gloo/NCCL traffic",
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
            f'use socket_ifname = {json.dumps(chosen)} (or "auto") unless traffic is routed on '
            "purpose",
        )


def _master_findings(
    host: HostConfig,
    facts: HostFacts,
    master: str,
    known: IPAddress | None,
    is_head: bool,
    has_ifname: bool,
) -> Iterator[Finding]:
    resolution = facts.master
    if resolution is None or resolution.name != master or is_loopback_name(master):
        return
    mapping = f" (e.g. {known} {master}, as the other hosts resolve it)" if known else ""
    if not resolution.addresses:
        yield Finding(
            Code.MASTER_UNRESOLVABLE,
            Severity.ERROR,
            host.name,
            f"{host.name} cannot resolve node 0's address {master} "
            f"({resolution.error or 'no addresses'}), so torchrun there cannot reach the "
            "rendezvous store",
            f"add {master} to DNS or to /etc/hosts on {host.name}{mapping}, or use node 0's IP "
            "address as its address in the hosts file",
        )
        return
    loopback = [address for address in resolution.addresses if address.is_loopback]
    if not loopback:
        return
    resolves = f"node 0's address {master} resolves to {_addresses(resolution.addresses)}"
    fix = (
        f"map {master} to node 0's real address in /etc/hosts on {host.name}{mapping}, "
        "or use node 0's IP address as its address in the hosts file"
    )
    if is_head:
        # On node 0 itself loopback does not break a ddptui run: torchrun's store listens on
        # every address of node 0, so node 0's own processes reach it through loopback. What
        # gloo/NCCL advertise to peers comes from the socket interface, or without one from
        # the hostname, which the hostname_* findings judge (an error when, as usual, node 0
        # is named by its hostname: then it is this same /etc/hosts line). So, as with
        # hostname_loopback, this is only a warning, and only once a socket interface makes
        # the runs safe; without one the hostname findings, or socket_ifname_undetermined
        # (no interface can be chosen from loopback), already point at this line.
        if not has_ifname:
            return
        severity = Severity.WARNING
        consequence = (
            "harmless for ddptui runs, but anything that listens on that name's address "
            f"on {host.name} would listen on loopback only"
        )
    elif len(loopback) == len(resolution.addresses):
        severity = Severity.ERROR
        consequence = "so torchrun there would connect to itself instead of node 0"
    else:
        # torchrun tries the addresses in order and moves on when one refuses: it reaches
        # node 0, unless something on this host listens on the master port.
        severity = Severity.WARNING
        consequence = "so torchrun there tries itself before node 0"
    yield Finding(
        Code.MASTER_RESOLVES_TO_LOOPBACK,
        severity,
        host.name,
        f"{resolves} on {host.name}, {consequence}",
        fix,
    )


def _stranded(host: HostConfig, master: str) -> bool:
    """Node 0 is at a loopback address but this host is not: it is another machine."""
    return is_loopback_name(master) and not is_loopback_name(host.address)


def _stranded_worker(head: HostConfig, host: HostConfig) -> Finding:
    return Finding(
        Code.MASTER_RESOLVES_TO_LOOPBACK,
        Severity.ERROR,
        host.name,
        f"node 0's address {head.address} is loopback, but {host.name} is at {host.address}: "
        "torchrun there would connect to itself instead of node 0",
        f"give {head.name} the address the other hosts reach it at; loopback addresses work "
        "only when every host has one (one machine standing in for a cluster)",
    )


def _known_master_address(
    probed: Sequence[tuple[HostConfig, HostFacts]], master: str
) -> IPAddress | None:
    """The address most hosts reach node 0's name at: the example in a fix."""
    counts = Counter(master_target(facts, master) for _, facts in probed)
    counts.pop(None, None)
    return max(counts, key=counts.__getitem__, default=None)


def _master_mismatch(
    probed: Sequence[tuple[HostConfig, HostFacts]], master: str
) -> Iterator[Finding]:
    """Hosts that resolve node 0's name to different addresses.

    Loopback addresses are left out: master_resolves_to_loopback reports them per host.
    """
    if is_loopback_name(master):
        return
    seen: dict[tuple[IPAddress, ...], list[str]] = {}
    for host, facts in probed:
        addresses = tuple(
            address for address in resolved_addresses(facts, master) if not address.is_loopback
        )
        if addresses:
            seen.setdefault(tuple(sorted(addresses, key=str)), []).append(host.name)
    if len(seen) < 2:
        return
    views = "; ".join(
        f"{_addresses(addresses)} on {hosts_list(names)}" for addresses, names in seen.items()
    )
    yield Finding(
        Code.MASTER_ADDRESS_MISMATCH,
        Severity.WARNING,
        None,
        f"the hosts resolve node 0's address {master} differently: {views}",
        "make DNS or /etc/hosts agree on every host, or use node 0's IP address as its address "
        "in the hosts file",
    )


def _hostname_findings(
    host: HostConfig, facts: HostFacts, has_ifname: bool, *, alone: bool
) -> Iterator[Finding]:
    hostname = facts.hostname if facts.hostname is not NA else host.name
    severity = Severity.INFO if alone else Severity.WARNING if has_ifname else Severity.ERROR
    fix = f"map {hostname} to the host's real address ({host.address}) in /etc/hosts"
    if not has_ifname:
        fix += f", or set socket_ifname for {host.name}"
    # Named by the host's own name, a grouped message would read "hostname each host ... on
    # each host".
    subject = "its own hostname" if hostname == host.name else f"hostname {hostname}"
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
    if alone:
        # gloo falls back to loopback when the hostname gives it no usable address.
        consequence = (
            "harmless while it is the only host (gloo/NCCL traffic stays on it), "
            "not once other hosts join"
        )
    elif has_ifname:
        consequence = (
            "harmless for ddptui runs (they set the socket interface), not for other tools"
        )
    yield Finding(code, severity, host.name, f"{subject} {trouble}, {consequence}", fix)


def _target(facts: HostFacts, master: str) -> str:
    """Node 0's address as this host sees it, for messages."""
    try:
        ipaddress.ip_address(master)
    except ValueError:
        pass
    else:
        return master
    target = master_target(facts, master)
    if target is not None:
        return f"{master} is {target} there"
    addresses = resolved_addresses(facts, master)
    if addresses:
        return f"{master} resolves only to {_addresses(addresses)} there"
    return f"{master} is a name that did not resolve there to an address"


def _master_unusable(facts: HostFacts, master: str) -> bool:
    """The host looked node 0's name up and got nothing it could reach node 0 at."""
    resolution = facts.master
    return (
        resolution is not None
        and resolution.name == master
        and master_target(facts, master) is None
    )


def _addresses(addresses: Sequence[IPAddress]) -> str:
    return ", ".join(str(address) for address in addresses)


def _describe(interfaces: Sequence[Interface], name: str) -> str:
    for interface in interfaces:
        if interface.name == name and interface.ipv4:
            return f"{name} ({', '.join(str(network) for network in interface.ipv4)})"
    return name


def _listing(interfaces: Sequence[Interface]) -> str:
    return ", ".join(_describe(interfaces, interface.name) for interface in interfaces)
