"""The resolved configuration as JSON data and as a hosts file that loads back the same."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from ddptui.config import (
    ClusterConfig,
    HostConfig,
    JobConfig,
    RecoveryConfig,
    config_to_dict,
    config_to_toml,
    parse_config,
)

HOSTS_FILE = Path("/etc/ddptui/hosts.toml")
RICH = """
[cluster]
user = "alice"
identity_file = "/keys/id"
env = { NCCL_DEBUG = "WARN" }
master_port = "auto"
connect_timeout = 2.5

[[hosts]]
name = "gpu-a"
address = "10.0.0.1"
gpus = [0, 2]

[[hosts]]
name = "gpu-b"
address = "10.0.0.2"
conda_env = "pt"
env = { "NCCL_IB_DISABLE" = "1" }

[[hosts]]
name = "cpu-c"
address = "cpu-c.example"
gpus = 0
rank0 = true
user = "bob"

[job]
nproc_per_node = 2
args = ["--epochs", "3", "--note", "a \\"quoted\\" word"]
"""


def test_json_shape_is_the_documented_one() -> None:
    data = config_to_dict(parse_config(RICH, HOSTS_FILE))

    assert list(data) == ["path", "cluster", "hosts", "job", "recovery"]
    assert data["path"] == str(HOSTS_FILE)
    assert list(data["cluster"]) == [field.name for field in fields(ClusterConfig)]
    assert list(data["job"]) == [field.name for field in fields(JobConfig)]
    assert list(data["recovery"]) == [field.name for field in fields(RecoveryConfig)]
    host_keys = [field.name for field in fields(HostConfig)]
    for host in data["hosts"]:
        assert list(host) == ["name", "node_rank", *host_keys[1:]]
    assert json.loads(json.dumps(data)) == data


def test_json_lists_hosts_in_node_rank_order_with_effective_values() -> None:
    data = config_to_dict(parse_config(RICH, HOSTS_FILE))

    assert [(host["node_rank"], host["name"]) for host in data["hosts"]] == [
        (0, "cpu-c"),
        (1, "gpu-a"),
        (2, "gpu-b"),
    ]
    cpu, gpu_a, gpu_b = data["hosts"]
    assert (cpu["user"], cpu["gpus"], cpu["identity_file"]) == ("bob", 0, "/keys/id")
    assert (gpu_a["user"], gpu_a["gpus"], gpu_a["known_hosts"]) == ("alice", [0, 2], None)
    assert gpu_b["env"] == {"NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "1"}
    assert data["cluster"]["master_port"] == "auto"
    assert data["job"]["args"] == ["--epochs", "3", "--note", 'a "quoted" word']


def test_text_lists_every_effective_value_per_host_in_node_rank_order() -> None:
    text = config_to_toml(parse_config(RICH, HOSTS_FILE))

    blocks = text.split("[[hosts]]")[1:]
    assert [block.split('"')[1] for block in blocks] == ["cpu-c", "gpu-a", "gpu-b"]
    for block in blocks:
        for field in fields(HostConfig):
            assert f"\n{field.name} = " in block or f"\n# {field.name}" in block, field.name
    assert '# node 0 (the rendezvous host)\n[[hosts]]\nname = "cpu-c"' in text
    assert '# python = "python3"  (not used: conda_env is set)' in blocks[2]


@pytest.mark.parametrize("text", [RICH, '[[hosts]]\nname = "a"\naddress = "h"\n'])
def test_text_loads_back_into_the_same_configuration(text: str) -> None:
    config = parse_config(text, HOSTS_FILE)

    again = parse_config(config_to_toml(config), HOSTS_FILE)

    assert again.cluster == config.cluster
    assert again.job == config.job
    assert again.ordered_hosts == config.ordered_hosts
    assert again.recovery == config.recovery
