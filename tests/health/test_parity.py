"""Version parity: the grid of each compared version and its odd host out, and the
packages that drift."""

from __future__ import annotations

from ddptui.config.model import HostConfig
from ddptui.health import Code, parity_rows
from ddptui.probe.facts import NA, HostFacts
from ddptui.remote.status import Reach, Reachability
from tests.helpers import A, B, C, Scenario, cpu_host


def _probed(scenario: Scenario) -> list[tuple[HostConfig, HostFacts]]:
    config = scenario.config
    return [(host, f) for host in config.ordered_hosts if (f := scenario.facts[host.name])]


def test_parity_grid_marks_the_odd_host() -> None:
    scenario = Scenario()
    scenario.part(B, "torch", version="2.3.0+cu121")
    cpu_host(scenario)
    rows = {row.key: row for row in parity_rows(_probed(scenario))}
    assert list(rows) == ["driver", "cuda_driver", "torch", "torch_cuda", "nccl", "python"]
    torch = rows["torch"]
    assert dict(torch.values) == {A: "2.4.1", B: "2.3.0", C: "2.4.1"}
    assert (torch.reference, torch.odd_hosts) == ("2.4.1", (B,))
    # A CPU host's torch build is shown, but only GPU hosts must agree on it.
    assert (rows["torch_cuda"].values[C], rows["torch_cuda"].odd_hosts) == ("cpu", ())
    # Not-available values are shown but never odd.
    assert (rows["driver"].values[C], rows["driver"].odd_hosts) == (NA, ())
    assert (rows["python"].reference, rows["python"].odd_hosts) == ("3.11.9", ())


def test_parity_tie_goes_to_node_0_even_when_listed_last() -> None:
    scenario = Scenario()
    del scenario.hosts[C], scenario.facts[C]
    scenario.host(B, rank0=True)
    scenario.part(B, "python", version="3.10.14")
    row = next(row for row in parity_rows(_probed(scenario)) if row.key == "python")
    assert (row.reference, row.odd_hosts) == ("3.10.14", (A,))


def test_package_drift_lists_a_readable_number_of_packages() -> None:
    scenario = Scenario()
    many = {f"pkg{i:02d}": "1.0" for i in range(20)}
    scenario.edit(A, pip_packages={"torch": "2.4.1+cu121", **many})
    scenario.edit(C, pip_packages={"torch": "2.4.1+cu121", **many})
    scenario.edit(B, pip_packages={"torch": "2.4.1+cu121", **dict.fromkeys(many, "2.0")})
    (drift,) = [f for f in scenario.run() if f.code is Code.PACKAGE_DRIFT]
    assert drift.host == B
    assert "20 pip packages" in drift.message
    assert "pkg07==1.0" in drift.hint and "pkg08==1.0" not in drift.hint
    assert "12 more" in drift.hint and "--json" in drift.hint


def test_a_drifting_training_framework_is_named_first() -> None:
    scenario = Scenario()
    deps = {f"dep{i:02d}": "1.0" for i in range(12)}
    same = {"torch": "2.4.1+cu121", "Transformers": "5.25.0", **deps}
    scenario.edit(A, pip_packages=same)
    scenario.edit(C, pip_packages=same)
    odd = {"torch": "2.4.1+cu121", "Transformers": "5.23.0", **dict.fromkeys(deps, "0.9")}
    scenario.edit(B, pip_packages=odd)
    (drift,) = [f for f in scenario.run() if f.code is Code.PACKAGE_DRIFT]
    assert drift.message.startswith(
        f"{B} differs from the other hosts in 13 pip packages: Transformers 5.23.0 (others: "
        "5.25.0), dep00 0.9"
    ), drift.message
    assert drift.hint.startswith("python3 -m pip install Transformers==5.25.0 dep00"), drift.hint


def test_among_many_hosts_a_finding_counts_those_that_agree_rather_than_naming_each() -> None:
    # 512 hosts, one with an older torch: its finding names it and counts the 511 others.
    scenario = Scenario()
    for index in range(3, 512):
        name = f"node{index:03d}"
        scenario.hosts[name] = HostConfig(name, f"10.0.{index // 250}.{index % 250 + 1}")
        scenario.facts[name] = scenario.facts[A]
    scenario.part(B, "torch", version="2.3.0+cu121")
    scenario.reach = dict.fromkeys(scenario.hosts, Reachability(Reach.OK))
    scenario.offsets = dict.fromkeys(scenario.hosts, 0.0)
    scenario.port_reachable = dict.fromkeys(scenario.hosts, True)

    (torch,) = [f for f in scenario.run() if f.code is Code.TORCH_MISMATCH]

    assert torch.message == (
        f"{B} has torch 2.3.0; {A}, {C}, node003, node004, node005, node006 and 505 more "
        "hosts have 2.4.1"
    )
