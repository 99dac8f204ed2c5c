"""Networking findings: the loopback-hostname trap, node 0 named by a hostname each host
resolves, and a loopback address that means one machine standing in for a cluster."""

from __future__ import annotations

from ipaddress import ip_address

from ddptui.config.model import HostConfig
from ddptui.health import Code, Severity
from ddptui.probe.facts import MasterResolution
from ddptui.remote.status import Reach, Reachability
from tests.helpers import (
    ADDRESSES,
    A,
    B,
    C,
    Scenario,
    healthy_facts,
    interfaces,
    master_resolves,
    master_unresolvable,
    named_master,
)


def test_local_loopback_cluster_is_not_the_trap() -> None:
    scenario = Scenario()
    for name in (A, B, C):
        scenario.host(name, address="127.0.0.1")
        scenario.edit(name, resolved=(ip_address("127.0.1.1"),))
    codes = {f.code for f in scenario.run()}
    assert Code.HOSTNAME_LOOPBACK not in codes
    assert Code.SOCKET_IFNAME_UNDETERMINED not in codes


def test_node_0_named_by_its_hostname_is_healthy() -> None:
    scenario = Scenario()
    named_master(scenario)
    findings = scenario.run()
    assert not [f for f in findings if f.severity is not Severity.INFO]
    chosen = [f for f in findings if f.code is Code.SOCKET_IFNAME_CHOSEN]
    assert [f.host for f in chosen] == [A, B, C]
    assert all("eth0 (10.0.0." in f.message and "node 0 at gpu-a" in f.message for f in chosen)


def test_a_worker_that_cannot_resolve_node_0_gets_one_error() -> None:
    """Its failed port test and undetermined interface are consequences, not more problems."""
    for breaks in (master_unresolvable, master_resolves(B, "127.0.1.1")):
        scenario = Scenario()
        breaks(scenario)
        scenario.port_reachable[B] = False
        findings = scenario.run()
        assert [(f.host, f.severity) for f in findings if f.severity is not Severity.INFO] == [
            (B, Severity.ERROR)
        ]
        assert (Code.SOCKET_IFNAME_CHOSEN, B) not in {(f.code, f.host) for f in findings}


def test_node_0_resolving_its_own_name_to_loopback_without_an_interface() -> None:
    """No interface can be chosen from loopback; the hostname findings judge gloo's address."""
    scenario = Scenario()
    master_resolves(A, "127.0.1.1")(scenario)
    scenario.edit(A, resolved=(ip_address("127.0.1.1"),))
    findings = {(f.code, f.host): f for f in scenario.run()}
    assert (Code.MASTER_RESOLVES_TO_LOOPBACK, A) not in findings
    assert findings[(Code.HOSTNAME_LOOPBACK, A)].severity is Severity.ERROR
    undetermined = findings[(Code.SOCKET_IFNAME_UNDETERMINED, A)]
    assert "gpu-a resolves only to 127.0.1.1 there" in undetermined.message


def test_a_loopback_name_is_the_single_machine_cluster() -> None:
    """Node 0 at "localhost" (one machine standing in for a cluster): loopback is intended."""
    scenario = Scenario()
    for name in (A, B, C):
        scenario.host(name, address="localhost" if name == A else "127.0.0.1")
        scenario.edit(
            name,
            master=MasterResolution("localhost", (ip_address("::1"), ip_address("127.0.0.1"))),
            interfaces=interfaces("lo=127.0.0.1/8"),
        )
    findings = scenario.run()
    assert not [f for f in findings if f.severity is not Severity.INFO]
    chosen = [f for f in findings if f.code is Code.SOCKET_IFNAME_CHOSEN]
    assert [f.host for f in chosen] == [A, B, C]
    assert all(" will use lo (127.0.0.1/8) " in f.message for f in chosen)


def test_one_host_named_by_a_loopback_hostname_is_healthy() -> None:
    """One box: gloo/NCCL traffic stays on it, so loopback and no interface are no trap."""
    scenario = Scenario()
    for name in (B, C):
        del scenario.hosts[name], scenario.facts[name], scenario.reach[name]
    scenario.host(A, address=A)
    scenario.edit(
        A,
        resolved=(ip_address("127.0.1.1"),),
        master=MasterResolution(A, (ip_address("127.0.1.1"),)),
    )
    findings = scenario.run()
    assert not [f for f in findings if f.severity is not Severity.INFO]
    codes = {f.code for f in findings}
    assert Code.HOSTNAME_LOOPBACK in codes
    assert Code.SOCKET_IFNAME_UNDETERMINED not in codes
    # The same host with a second one is the trap again.
    scenario.hosts[B] = HostConfig(B, ADDRESSES[B])
    scenario.facts[B], scenario.reach[B] = healthy_facts(B), Reachability(Reach.OK)
    errors = {(f.code, f.host) for f in scenario.run() if f.severity is Severity.ERROR}
    assert (Code.HOSTNAME_LOOPBACK, A) in errors
