"""``ddptui check`` end to end: real sshd hosts, real conditions, the findings users would read.

Several faults share one run where they are independent, on different hosts, so each test
also proves every finding lands on the host that has the problem and on no other.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ddptui.cli import main
from ddptui.onhost.probe_torch_cache import TORCH_CACHE_DIR
from tests.fixtures.gpu import nvidia_smi_double
from tests.testbed import (
    TestBed,
    TestHost,
    cut_link,
    firewall_port,
    install_double,
    occupy_port,
    rotate_host_key,
    set_name_resolution,
    stop_sshd,
)
from tests.testbed.keys import write_key_pair
from tests.testbed.network import HOST_IFNAME

pytestmark = pytest.mark.cluster

MASTER_PORT = 29500


def _check(
    bed: TestBed,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *,
    hosts: Sequence[TestHost] | None = None,
    cluster: Mapping[str, object] = {},
    host_overrides: Mapping[str, Mapping[str, object]] = {},
    job: Mapping[str, object] = {},
) -> tuple[int, dict[str, Any]]:
    hosts_file = bed.write_hosts_file(
        tmp_path / "hosts.toml",
        hosts,
        cluster={"master_port": MASTER_PORT, **cluster},
        host_overrides=host_overrides,
        job=job,
    )
    capsys.readouterr()
    exit_code = main(["check", str(hosts_file), "--json"])
    return exit_code, json.loads(capsys.readouterr().out)


def _hosts_with(report: dict[str, Any], code: str) -> list[str | None]:
    return [finding["host"] for finding in report["findings"] if finding["code"] == code]


def _finding(report: dict[str, Any], code: str, host: str | None) -> dict[str, Any]:
    matches = [f for f in report["findings"] if f["code"] == code and f["host"] == host]
    assert len(matches) == 1, f"expected one {code} for {host}: {report['findings']}"
    return matches[0]


def _errors(report: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(f["code"], f["host"]) for f in report["findings"] if f["severity"] == "error"]


def _wrapper(host: TestHost, name: str, lines: list[str]) -> str:
    """A python wrapper on this host's own PATH: the host's Python in a different setting."""
    script = "#!/bin/sh\n" + "\n".join(lines) + "\n"
    return str(install_double(host, name, script))


def test_healthy_test_bed_passes(
    testbed: TestBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exit_code, report = _check(testbed, tmp_path, capsys)
    assert exit_code == 0, report["findings"]
    assert report["healthy"] is True
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    hosts = report["hosts"]
    assert [h["name"] for h in hosts] == [h.name for h in testbed.hosts]
    assert all(h["reachable"] for h in hosts)
    assert [h["facts"]["hostname"] for h in hosts] == [h.hostname for h in testbed.hosts]
    assert {h["facts"]["torch"]["version"] for h in hosts} == {"2.13.0+cpu"}
    assert [h["master_port_reachable"] for h in hosts] == [None, True, True, True]
    assert report["master_port_test"] == {"ran": True, "why": ""}
    assert all(h["probe_failure"] is None for h in hosts)
    assert all(abs(h["clock_offset_s"]) < 2 for h in hosts)
    assert sorted(_hosts_with(report, "socket_ifname_chosen")) == [h.name for h in testbed.hosts]
    # Each host of the bed has a workdir of its own.
    assert _hosts_with(report, "workdir_shared") == []


def test_hosts_that_share_their_workdir_are_told_apart_from_those_that_do_not(
    testbed: TestBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The bed's hosts share one filesystem: one path is one directory for all, as an NFS
    # home is; the check finds that out from the identity kept in it, not from the path.
    nfs = {"workdir": str(tmp_path / "nfs-home" / "ddptui-runs")}
    node1, node3 = testbed.hosts[1], testbed.hosts[3]
    overrides = {node1.name: nfs, node3.name: nfs}
    exit_code, report = _check(testbed, tmp_path, capsys, host_overrides=overrides)
    assert exit_code == 0, report["findings"]
    assert _hosts_with(report, "workdir_shared") == [node1.name, node3.name]
    finding = _finding(report, "workdir_shared", node1.name)
    assert (
        f"{nfs['workdir']} on {node1.name} is on storage that 1 other host(s)"
        in (finding["message"])
    )
    # Only the probe's cache is left: the torch facts, one file per host, and the identity.
    assert [p.name for p in Path(nfs["workdir"]).iterdir()] == [TORCH_CACHE_DIR]


def test_auto_master_port_is_still_tested_from_every_worker(
    testbed: TestBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node0 = testbed.hosts[0]
    # Occupying the usual port proves the check does not fall back to it.
    holder = occupy_port(node0, MASTER_PORT)
    exit_code, report = _check(testbed, tmp_path, capsys, cluster={"master_port": "auto"})
    holder.release()
    assert exit_code == 0, report["findings"]
    assert [h["master_port_reachable"] for h in report["hosts"]] == [None, True, True, True]
    assert report["hosts"][0]["facts"]["port"] is None
    assert _hosts_with(report, "master_port_in_use") == []


def test_each_unreachable_host_gets_its_own_reason(
    testbed: TestBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node0, node1, node2, node3 = testbed.hosts
    stop_sshd(node1)
    cut_link(node2)
    rotate_host_key(node3)
    exit_code, report = _check(testbed, tmp_path, capsys)
    assert exit_code == 1
    reach = {h["name"]: h["reach"] for h in report["hosts"]}
    assert reach == {
        node0.name: "ok",
        node1.name: "refused",
        node2.name: "timeout",
        node3.name: "hostkey_changed",
    }
    assert sorted(_hosts_with(report, "host_unreachable")) == [node1.name, node2.name]
    changed = _finding(report, "host_key_changed", node3.name)
    assert "man-in-the-middle" in changed["message"] + changed["hint"]
    assert set(_errors(report)) == {
        ("host_unreachable", node1.name),
        ("host_unreachable", node2.name),
        ("host_key_changed", node3.name),
    }


def test_wrong_key_and_unknown_host_key(
    testbed: TestBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node1, node2 = testbed.hosts[1:3]
    stranger_key = tmp_path / "stranger_ed25519"
    write_key_pair(stranger_key, "stranger")
    empty_known_hosts = tmp_path / "known_hosts_empty"
    empty_known_hosts.write_text("")
    exit_code, report = _check(
        testbed,
        tmp_path,
        capsys,
        host_overrides={
            node1.name: {"identity_file": str(stranger_key)},
            node2.name: {"known_hosts": str(empty_known_hosts)},
        },
    )
    assert exit_code == 1
    auth = _finding(report, "ssh_auth_failed", node1.name)
    assert str(stranger_key) in auth["message"] + auth["hint"]
    unknown = _finding(report, "host_key_unknown", node2.name)
    assert "ddptui trust" in unknown["hint"]
    assert set(_errors(report)) == {
        ("ssh_auth_failed", node1.name),
        ("host_key_unknown", node2.name),
    }


def test_python_and_torch_problems(
    testbed: TestBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node1, node2 = testbed.hosts[1:3]
    exit_code, report = _check(
        testbed,
        tmp_path,
        capsys,
        host_overrides={
            node1.name: {"python": "/opt/no-such-env/bin/python3"},
            node2.name: {"python": "/usr/bin/python3"},  # Debian's Python: no torch
        },
    )
    assert exit_code == 1
    missing = _finding(report, "python_missing", node1.name)
    assert "/opt/no-such-env/bin/python3" in missing["message"]
    _finding(report, "torch_missing", node2.name)
    assert set(_errors(report)) == {
        ("python_missing", node1.name),
        ("torch_missing", node2.name),
    }


def test_a_different_torch_on_one_host_is_the_odd_one_out(
    testbed: TestBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node2 = testbed.hosts[2]
    # A real second torch on that host's path: its own package and install record.
    site = node2.home / "older-site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(
        "__version__ = '2.12.1+cpu'\n"
        "class version:\n    cuda = None\n"
        "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n"
        "    @staticmethod\n    def device_count():\n        return 0\n"
        "class distributed:\n    @staticmethod\n    def is_gloo_available():\n        return True\n"
        "    @staticmethod\n    def is_nccl_available():\n        return False\n"
    )
    record = site / "torch-2.12.1.dist-info"
    record.mkdir()
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.12.1\n")
    python = _wrapper(node2, "python-older", [f'PYTHONPATH={site} exec {sys.executable} "$@"'])
    exit_code, report = _check(
        testbed, tmp_path, capsys, host_overrides={node2.name: {"python": python}}
    )
    assert exit_code == 1
    mismatch = _finding(report, "torch_mismatch", node2.name)
    assert "2.12.1" in mismatch["message"] and "2.13.0" in mismatch["message"]
    drift = _finding(report, "package_drift", node2.name)
    assert "torch" in drift["message"]
    assert set(_errors(report)) == {("torch_mismatch", node2.name)}


def test_a_torch_slower_than_the_configured_limit_is_named_with_it(
    testbed: TestBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node3 = testbed.hosts[3]
    site = node3.home / "slow-site"
    (site / "torch").mkdir(parents=True, exist_ok=True)
    # Well inside the default limit, so only the configured one can cut it short.
    (site / "torch" / "__init__.py").write_text("import time\ntime.sleep(10)\n")
    python = _wrapper(node3, "python-slow", [f'PYTHONPATH={site} exec {sys.executable} "$@"'])
    exit_code, report = _check(
        testbed,
        tmp_path,
        capsys,
        # Alone: a real torch imported beside it could take over 3 s on the bed's two cores.
        hosts=[node3],
        cluster={"torch_import_timeout": 3},
        host_overrides={node3.name: {"python": python}},
    )
    assert exit_code == 1
    slow = _finding(report, "torch_import_timeout", node3.name)
    assert f"did not finish within 3 s on {node3.name}" in slow["message"]
    assert "cluster.torch_import_timeout" in slow["hint"]
    assert set(_errors(report)) == {("torch_import_timeout", node3.name)}


def test_network_traps_hostname_port_in_use_and_interface(
    testbed: TestBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node0, node1, node2, node3 = testbed.hosts
    holder = occupy_port(node0, MASTER_PORT)
    set_name_resolution(node1, "loopback")
    set_name_resolution(node2, "missing")
    exit_code, report = _check(
        testbed, tmp_path, capsys, host_overrides={node3.name: {"socket_ifname": "ib0"}}
    )
    holder.release()
    assert exit_code == 1
    _finding(report, "master_port_in_use", node0.name)
    loopback = _finding(report, "hostname_loopback", node1.name)
    assert "127.0.1.1" in loopback["message"]
    _finding(report, "hostname_unresolvable", node2.name)
    missing_ifname = _finding(report, "socket_ifname_missing", node3.name)
    assert "ib0" in missing_ifname["message"]
    assert _hosts_with(report, "hostname_loopback") == [node1.name]
    assert _hosts_with(report, "master_port_in_use") == [node0.name]


def _node0_by_hostname(
    bed: TestBed, home: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, dict[str, object]]:
    """Host overrides that name node 0 by its hostname, as hosts files often do.

    The bed's names resolve on its hosts but not here on the head node, so the head's own
    ~/.ssh/config maps the name for SSH, as it would for a user without DNS for the cluster.
    """
    node0 = bed.hosts[0]
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "config").write_text(f"Host {node0.hostname}\n  HostName {node0.address}\n")
    monkeypatch.setenv("HOME", str(home))
    return {node0.name: {"address": node0.hostname}}


def test_node_0_named_by_its_hostname(
    testbed: TestBed,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node0 = testbed.hosts[0]
    overrides = _node0_by_hostname(testbed, tmp_path / "home", monkeypatch)
    exit_code, report = _check(testbed, tmp_path, capsys, host_overrides=overrides)
    assert exit_code == 0, report["findings"]
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    master = {"name": node0.hostname, "addresses": [node0.address], "error": ""}
    assert [h["facts"]["master"] for h in report["hosts"]] == [master] * len(testbed.hosts)
    chosen = {
        f["host"]: f["message"] for f in report["findings"] if f["code"] == "socket_ifname_chosen"
    }
    assert sorted(chosen) == [h.name for h in testbed.hosts]
    assert all(f"will use {HOST_IFNAME} (" in message for message in chosen.values())
    assert [h["master_port_reachable"] for h in report["hosts"]] == [None, True, True, True]


def test_a_one_host_cluster_named_by_a_loopback_hostname_is_healthy(
    testbed: TestBed,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The usual first cluster: one box, named by its hostname, which maps to 127.0.1.1."""
    node0 = testbed.hosts[0]
    overrides = _node0_by_hostname(testbed, tmp_path / "home", monkeypatch)
    set_name_resolution(node0, "loopback")
    exit_code, report = _check(testbed, tmp_path, capsys, hosts=[node0], host_overrides=overrides)
    assert exit_code == 0, report["findings"]
    assert report["hosts"][0]["facts"]["master"]["addresses"] == ["127.0.1.1"]
    assert [(f["code"], f["severity"]) for f in report["findings"]] == [
        ("hostname_loopback", "info"),
    ]
    why = "a one-host cluster: no worker connects to node 0 over the network"
    assert report["master_port_test"] == {"ran": False, "why": why}
    assert main(["check", str(tmp_path / "hosts.toml")]) == 0
    out = capsys.readouterr().out
    assert f"master port test skipped: {why}" in out
    assert "healthy: 1 host ready" in out


def test_workers_that_cannot_resolve_node_0s_name(
    testbed: TestBed,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node0, node1, node2, node3 = testbed.hosts
    overrides = _node0_by_hostname(testbed, tmp_path / "home", monkeypatch)
    set_name_resolution(node1, "missing", name=node0.hostname)
    set_name_resolution(node2, "loopback", name=node0.hostname)
    exit_code, report = _check(testbed, tmp_path, capsys, host_overrides=overrides)
    assert exit_code == 1
    unresolvable = _finding(report, "master_unresolvable", node1.name)
    assert f"{node0.address} {node0.hostname}" in unresolvable["hint"]
    loopback = _finding(report, "master_resolves_to_loopback", node2.name)
    assert f"{node0.hostname} resolves to 127.0.1.1 on {node2.name}" in loopback["message"]
    assert set(_errors(report)) == {
        ("master_unresolvable", node1.name),
        ("master_resolves_to_loopback", node2.name),
    }
    # Both failed the port test, for the reason above: no firewall finding, no other warning.
    assert [h["master_port_reachable"] for h in report["hosts"]] == [None, False, False, True]
    assert [f for f in report["findings"] if f["severity"] == "warning"] == []
    assert sorted(_hosts_with(report, "socket_ifname_chosen")) == [node0.name, node3.name]


def test_firewalled_master_port_is_unreachable_from_every_worker(
    testbed: TestBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node0 = testbed.hosts[0]
    firewall_port(node0, MASTER_PORT)
    exit_code, report = _check(testbed, tmp_path, capsys)
    assert exit_code == 1
    workers = [h.name for h in testbed.hosts[1:]]
    assert sorted(_hosts_with(report, "master_port_unreachable")) == workers
    assert [h["master_port_reachable"] for h in report["hosts"]] == [None, False, False, False]
    assert _hosts_with(report, "master_port_in_use") == []


def test_clock_skew_disk_and_the_nccl_backend_without_gpus(
    testbed: TestBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node3 = testbed.hosts[3]
    python = _wrapper(node3, "python-skewed", [f'exec faketime -f "+45s" {sys.executable} "$@"'])
    exit_code, report = _check(
        testbed,
        tmp_path,
        capsys,
        cluster={"backend": "nccl", "min_free_disk_gb": 10**9},
        host_overrides={node3.name: {"python": python}},
    )
    assert exit_code == 1
    assert _hosts_with(report, "clock_skew") == [node3.name]
    offset = next(h["clock_offset_s"] for h in report["hosts"] if h["name"] == node3.name)
    assert 40 < offset < 50
    names = [h.name for h in testbed.hosts]
    assert sorted(_hosts_with(report, "low_disk")) == names
    assert sorted(_hosts_with(report, "nccl_without_gpus")) == names


def test_gpu_findings_from_recorded_nvidia_smi(
    testbed: TestBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node0, node1, node2, node3 = testbed.hosts
    for host, fixture in (
        (node0, "h100x8_idle"),
        (node1, "h100x8_idle"),
        (node2, "h100x8_driver535"),
        (node3, "h200_busy"),  # recorded on a real H200, the others reproduced
    ):
        install_double(host, "nvidia-smi", nvidia_smi_double(fixture))
    exit_code, report = _check(
        testbed, tmp_path, capsys, cluster={"backend": "nccl"}, job={"nproc_per_node": "gpus"}
    )
    assert exit_code == 1
    gpus = {h["name"]: h["facts"]["gpus"] for h in report["hosts"]}
    assert [len(gpus[h.name]["devices"]) for h in testbed.hosts] == [8, 8, 8, 1]
    assert gpus[node0.name]["driver_version"] == "550.54.15"
    assert gpus[node0.name]["source"] == "nvidia-smi"
    # 535.104.05 and 580.159.04 are each the odd ones out against node0 and node1's 550.54.15
    assert sorted(_hosts_with(report, "driver_mismatch")) == [node2.name, node3.name]
    busy = _finding(report, "not_enough_free_gpus", node3.name)
    assert "GPU 0 is held by python3 (pid 529, 20998 MiB)" in busy["message"]
    # torch on the test bed is a CPU build: it cannot drive the GPUs nvidia-smi reports
    assert sorted(_hosts_with(report, "torch_cuda_unavailable")) == [h.name for h in testbed.hosts]


def test_human_report_shows_the_odd_value_and_the_fix(
    testbed: TestBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node1 = testbed.hosts[1]
    hosts_file = testbed.write_hosts_file(
        tmp_path / "hosts.toml",
        cluster={"master_port": MASTER_PORT},
        host_overrides={node1.name: {"python": "/opt/no-such-env/bin/python3"}},
    )
    capsys.readouterr()
    assert main(["check", str(hosts_file)]) == 1
    out = capsys.readouterr().out
    assert "version parity" in out
    assert "python_missing" in out
    assert "fix:" in out
    assert "not healthy: 1 error" in out


def test_bad_hosts_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts_file = tmp_path / "hosts.toml"
    hosts_file.write_text('[[hosts]]\nname = "a"\naddress = "10.213.250.10"\nprot = 22\n')
    assert main(["check", str(hosts_file)]) == 2
    assert '"prot"' in capsys.readouterr().err


def test_a_failing_probe_is_reachable_and_says_why(
    testbed: TestBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node0, node1 = testbed.hosts[:2]
    crashing = _wrapper(node1, "python-crashing", ["echo 'boom \033]0;owned\007' >&2", "exit 3"])
    exit_code, report = _check(
        testbed,
        tmp_path,
        capsys,
        host_overrides={node0.name: {"python": "/bin/true"}, node1.name: {"python": crashing}},
    )
    assert exit_code == 1
    hosts = {h["name"]: h for h in report["hosts"]}
    assert [(hosts[n]["reachable"], hosts[n]["reach"]) for n in (node0.name, node1.name)] == [
        (True, "ok"),
        (True, "ok"),
    ]
    assert hosts[node0.name]["probe_failure"] == {
        "reason": "the probe did not print a JSON document; it printed: (no output)",
        "exit_status": 0,
        "stderr_tail": "",
    }
    assert hosts[node1.name]["probe_failure"] == {
        "reason": "it exited with an error",
        "exit_status": 3,
        "stderr_tail": "boom \\x1b]0;owned\\x07",
    }
    true = _finding(report, "probe_failed", node0.name)
    assert "under /bin/true: the probe did not print a JSON document" in true["message"]
    crashed = _finding(report, "probe_failed", node1.name)
    assert "(exit status 3); its stderr ends:\nboom \\x1b]0;owned\\x07" in crashed["message"]
    assert set(_errors(report)) == {("probe_failed", node0.name), ("probe_failed", node1.name)}
    why = f"node 0 ({node0.name}) was not probed"
    assert report["master_port_test"] == {"ran": False, "why": why}
