"""One machine standing in for a cluster: every host at a loopback address (``ddptui demo``).

Its ranks rightly meet on loopback; a host at a real address beside a loopback node 0 is another
machine, for which node 0's address means itself.
"""

from __future__ import annotations

from dataclasses import replace
from ipaddress import ip_address

from ddptui.config.model import HostConfig
from ddptui.health import Code, HostCheck, Severity
from ddptui.health.resources import one_machine
from ddptui.plan.launch import plan_launch
from ddptui.probe.facts import MasterResolution
from ddptui.remote.status import Reach, Reachability
from tests.helpers import ADDRESSES, A, B, C, Scenario, interfaces

RUN = "20261201-000000-demo"


def _same_machine(scenario: Scenario, address: str = "127.0.0.1") -> None:
    """Every host served on this machine's loopback, on its own SSH port, as the demo does;
    the hostname is Debian's 127.0.1.1 line, which is the trap on a real cluster."""
    for port, name in enumerate((A, B, C), start=2201):
        scenario.host(name, address=address, port=port)
        scenario.edit(
            name,
            hostname="box",
            resolved=(ip_address("127.0.1.1"),),
            interfaces=interfaces("lo=127.0.0.1/8", "eth0=10.0.0.9/24"),
            master=MasterResolution(address, (ip_address("127.0.0.1"),)),
        )


def test_a_loopback_cluster_is_healthy_and_meets_on_lo() -> None:
    scenario = Scenario()
    _same_machine(scenario)
    findings = scenario.run()
    assert [f for f in findings if f.severity is not Severity.INFO] == []
    chosen = [f for f in findings if f.code is Code.SOCKET_IFNAME_CHOSEN]
    assert [f.host for f in chosen] == [A, B, C]
    assert all(
        " will use lo (127.0.0.1/8) to reach node 0 at 127.0.0.1" in f.message for f in chosen
    )
    assert Code.HOSTNAME_LOOPBACK not in {f.code for f in findings}


def test_a_worker_at_a_real_address_beside_a_loopback_node_0_is_the_one_error() -> None:
    """It is another machine: node 0's 127.0.0.1 is itself there. Its failed port test is a
    consequence, and loopback is no interface for it; its hostname trap still counts."""
    scenario = Scenario()
    _same_machine(scenario)
    scenario.host(B, address=ADDRESSES[B], port=22)
    scenario.port_reachable[B] = False
    findings = scenario.run()
    errors = [(f.code, f.host) for f in findings if f.severity is Severity.ERROR]
    assert (Code.MASTER_RESOLVES_TO_LOOPBACK, B) in errors
    assert (Code.HOSTNAME_LOOPBACK, B) in errors
    assert {host for _, host in errors} == {B}
    assert (Code.MASTER_PORT_UNREACHABLE, B) not in errors
    stranded = next(f for f in findings if f.code is Code.MASTER_RESOLVES_TO_LOOPBACK)
    assert "127.0.0.1 is loopback, but gpu-b is at 10.0.0.2" in stranded.message
    assert "every host" in stranded.hint
    assert (Code.SOCKET_IFNAME_CHOSEN, B) not in {(f.code, f.host) for f in findings}


def test_a_loopback_cluster_plans_node_0_at_127_0_0_1_over_lo() -> None:
    scenario = Scenario()
    _same_machine(scenario, address="localhost")
    config = scenario.config
    checks = [
        HostCheck(
            host,
            Reachability(Reach.OK),
            replace(facts, disk=replace(facts.disk, path=f"/tmp/{host.name}")),
        )
        for host, facts in ((host, scenario.facts[host.name]) for host in config.hosts)
        if facts is not None
    ]
    plan = plan_launch(config, checks, run_id=RUN)
    assert plan.master_addr == "127.0.0.1"
    assert all("--master-addr=127.0.0.1" in node.argv for node in plan.nodes)
    assert [node.env.get("GLOO_SOCKET_IFNAME") for node in plan.nodes] == ["lo"] * 3


def test_one_machine_is_one_host_or_every_host_at_loopback() -> None:
    scenario = Scenario()
    assert not one_machine(scenario.config)
    _same_machine(scenario)
    assert one_machine(scenario.config)
    scenario.hosts[C] = HostConfig(C, ADDRESSES[C])
    assert not one_machine(scenario.config)
    for name in (A, B):
        del scenario.hosts[name]
    assert one_machine(scenario.config)
