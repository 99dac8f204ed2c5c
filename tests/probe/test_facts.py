"""Parsing the probe's JSON: healthy and broken hosts, not-available fields, garbage."""

from __future__ import annotations

import copy
import ipaddress
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddptui.probe.facts import NA, GpuProcess, MasterResolution
from ddptui.probe.parse import ProbeError, parse_facts

HEALTHY: dict[str, Any] = {
    "probe_version": 1,
    "host": {"hostname": "gpu-a", "fqdn": "gpu-a.lab", "addresses": ["10.0.0.1"]},
    "interfaces": {
        "source": "ip",
        "items": [
            {"name": "lo", "ipv4": [{"address": "127.0.0.1", "prefixlen": 8}]},
            {"name": "eth0", "ipv4": [{"address": "10.0.0.1", "prefixlen": 24}]},
        ],
    },
    "python": {
        "version": "3.11.9",
        "executable": "/opt/conda/envs/dist/bin/python",
        "is_conda": True,
        "conda_env": "dist",
    },
    "torch": {
        "status": "ok",
        "version": "2.4.1+cu121",
        "cuda": "12.1",
        "cuda_available": True,
        "device_count": 2,
        "nccl": "2.20.5",
        "gloo_available": True,
    },
    "gpus": {
        "source": "nvml",
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
        "problem": "",
        "devices": [
            {
                "index": 0,
                "uuid": "GPU-0",
                "name": "NVIDIA H100 80GB HBM3",
                "memory_total_mib": 81559,
                "memory_used_mib": 1,
                "utilization_pct": 0,
                "processes": [],
            },
            {
                "index": 1,
                "uuid": "GPU-1",
                "name": "NVIDIA H100 80GB HBM3",
                "memory_total_mib": 81559,
                "memory_used_mib": 30000,
                "utilization_pct": None,
                "processes": [{"pid": 7, "name": "python", "used_memory_mib": None}],
            },
        ],
    },
    "disk": {"path": "/home/a/runs", "checked_path": "/home/a", "free_bytes": 5, "total_bytes": 9},
    "system": {"cpu_count": 64, "memory_total_bytes": 2**40},
    "packages": {"pip": {"torch": "2.4.1+cu121", "numpy": "1.26.4"}, "conda": {"nccl": "2.20.5"}},
    "port": {"port": 29500, "in_use": False},
    "master": {"name": "gpu-a", "addresses": ["10.0.0.1", "fd00::1"]},
    "time": 1700000000.5,
}


def doc(**changes: Any) -> str:
    """HEALTHY with top-level sections replaced (a value of None removes the section)."""
    result = copy.deepcopy(HEALTHY)
    for key, value in changes.items():
        if value is None:
            result.pop(key)
        else:
            result[key] = value
    return json.dumps(result)


def test_healthy_host() -> None:
    facts = parse_facts(doc())
    assert (facts.hostname, facts.fqdn) == ("gpu-a", "gpu-a.lab")
    assert facts.resolved == (ipaddress.ip_address("10.0.0.1"),)
    assert facts.loopback_addresses == ()
    assert facts.interfaces is not NA
    assert facts.interfaces[1].name == "eth0"
    assert facts.interfaces[1].ipv4 == (ipaddress.IPv4Interface("10.0.0.1/24"),)
    assert facts.python.conda_env == "dist"
    assert facts.torch.ok
    assert (facts.torch.version, facts.torch.cuda_build, facts.torch.nccl_version) == (
        "2.4.1+cu121",
        "12.1",
        "2.20.5",
    )
    assert facts.gpus.source == "nvml"
    busy = facts.gpus.devices[1]
    assert busy.utilization_pct is NA
    assert busy.processes == (GpuProcess(pid=7, name="python", used_memory_mib=NA),)
    assert facts.disk.free_bytes == 5
    assert facts.pip_packages == {"torch": "2.4.1+cu121", "numpy": "1.26.4"}
    assert facts.conda_packages == {"nccl": "2.20.5"}
    assert facts.port is not None and facts.port.in_use is False
    assert facts.master == MasterResolution(
        "gpu-a", (ipaddress.ip_address("10.0.0.1"), ipaddress.ip_address("fd00::1"))
    )
    assert facts.time == 1700000000.5
    assert facts.section_errors == {}


def test_broken_host() -> None:
    facts = parse_facts(
        doc(
            host={"hostname": "gpu-b", "addresses": [], "resolve_error": "gaierror: -2"},
            interfaces={"error": "PermissionError: no"},
            torch={"status": "missing"},
            gpus={"source": "none", "devices": [], "problem": "nvidia-smi not found"},
            packages={"pip": {}, "conda": None},
            port=None,
        )
    )
    assert facts.resolve_error == "gaierror: -2"
    assert facts.fqdn is NA
    assert facts.interfaces is NA
    assert facts.section_errors == {"interfaces": "PermissionError: no"}
    assert facts.torch.status == "missing"
    assert facts.torch.version is NA
    assert (facts.gpus.source, facts.gpus.devices, facts.gpus.problem) == (
        "none",
        (),
        "nvidia-smi not found",
    )
    assert facts.gpus.driver_version is NA
    assert facts.conda_packages is None
    assert facts.port is None


def test_hostname_resolving_to_loopback() -> None:
    facts = parse_facts(doc(host={"hostname": "gpu-b", "addresses": ["127.0.1.1", "10.0.0.2"]}))
    assert facts.loopback_addresses == (ipaddress.ip_address("127.0.1.1"),)


@pytest.mark.parametrize(
    ("master", "expected"),
    [
        (
            {"name": "gpu-a", "error": "gaierror: [Errno -2] Name or service not known"},
            MasterResolution("gpu-a", error="gaierror: [Errno -2] Name or service not known"),
        ),
        (
            {"name": "gpu-a", "addresses": ["127.0.1.1", "junk", 7]},
            MasterResolution("gpu-a", (ipaddress.ip_address("127.0.1.1"),)),
        ),
        ({"error": "RuntimeError: can't start new thread"}, None),
        ("gpu-a", None),
        (None, None),
    ],
    ids=["unresolvable", "odd-addresses", "no-name", "not-an-object", "not-asked"],
)
def test_master_resolution(master: Any, expected: MasterResolution | None) -> None:
    facts = parse_facts(doc(master=master))
    assert facts.master == expected
    # Not resolving is a fact about the host, not a section the probe failed to read.
    assert facts.section_errors == {}


def test_cpu_torch_build_is_none_not_unavailable() -> None:
    torch = {"status": "ok", "version": "2.13.0+cpu", "cuda": None, "cuda_available": False}
    facts = parse_facts(doc(torch=torch))
    assert facts.torch.cuda_build is None
    assert facts.torch.nccl_version is NA


@pytest.mark.parametrize(
    ("torch", "status", "detail"),
    [
        ({"status": "timeout", "detail": "slow"}, "timeout", "slow"),
        (
            {"status": "error", "detail": "ImportError: libcudart"},
            "error",
            "ImportError: libcudart",
        ),
        ({"error": "OSError: fork failed"}, "error", "OSError: fork failed"),
        ({"status": "weird"}, "error", "no status reported"),
        ("nonsense", "error", "missing from the probe's output"),
    ],
)
def test_torch_problems(torch: Any, status: str, detail: str) -> None:
    facts = parse_facts(doc(torch=torch))
    assert (facts.torch.status, facts.torch.detail, facts.torch.version) == (status, detail, NA)


@pytest.mark.parametrize(
    "value",
    [None, "[N/A]", True, 1.5, [], {}],
    ids=["null", "string", "bool", "float", "list", "object"],
)
def test_mistyped_gpu_fields_are_not_available(value: Any) -> None:
    device = {"index": 0, "memory_used_mib": value, "utilization_pct": value, "processes": value}
    facts = parse_facts(doc(gpus={"source": "nvidia-smi", "devices": [device, "junk"]}))
    (gpu,) = facts.gpus.devices
    assert (gpu.memory_used_mib, gpu.utilization_pct, gpu.uuid) == (NA, NA, NA)
    assert gpu.processes == (() if value == [] else NA)


def test_missing_sections_are_recorded() -> None:
    facts = parse_facts(json.dumps({"probe_version": 1}))
    assert set(facts.section_errors) == {
        "host",
        "interfaces",
        "python",
        "gpus",
        "disk",
        "system",
        "packages",
    }
    assert facts.torch.status == "error"
    assert (facts.pip_packages, facts.time, facts.disk.free_bytes) == (NA, NA, NA)


def test_login_banner_before_the_document() -> None:
    facts = parse_facts("Welcome to gpu-a!\nLast login: yesterday\n" + doc() + "\n")
    assert facts.hostname == "gpu-a"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "(no output)"),
        ("bash: python3: command not found", "command not found"),
        ("[1, 2]", "[1, 2]"),
        (doc()[:100], "probe_version"),
        (json.dumps({"probe_version": 2}), "probe_version 2"),
        (json.dumps({"hello": 1}), "probe_version None"),
    ],
)
def test_garbage_raises_probe_error(text: str, says: str) -> None:
    with pytest.raises(ProbeError, match="probe") as raised:
        parse_facts(text)
    assert says in str(raised.value)


def test_to_json_is_plain_json() -> None:
    facts = parse_facts(doc())
    data = json.loads(json.dumps(facts.to_json()))
    assert data["interfaces"][1] == {"name": "eth0", "ipv4": ["10.0.0.1/24"]}
    assert data["gpus"]["devices"][1]["utilization_pct"] is None
    assert data["torch"]["version"] == "2.4.1+cu121"
    assert data["resolved"] == ["10.0.0.1"]
    assert data["master"] == {"name": "gpu-a", "addresses": ["10.0.0.1", "fd00::1"], "error": ""}


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key/index path into ``value``: the places a host could send something odd."""
    children: list[tuple[Any, Any]] = []
    if isinstance(value, dict):
        children = list(value.items())
    elif isinstance(value, list):
        children = list(enumerate(value))
    paths = []
    for key, child in children:
        paths.append((*prefix, key))
        paths += _paths(child, (*prefix, key))
    return paths


PATHS = [path for path in _paths(HEALTHY) if path != ("probe_version",)]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=4,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PATHS), json_values), min_size=1, max_size=3))
def test_any_odd_value_anywhere_parses(replacements: list[tuple[tuple[Any, ...], Any]]) -> None:
    data = copy.deepcopy(HEALTHY)
    for path, value in replacements:
        target = data
        try:
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier replacement removed this place
    parse_facts(json.dumps(data))
