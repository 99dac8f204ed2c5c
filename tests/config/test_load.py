"""What a valid hosts file loads into: defaults, overrides, merging, paths, node order."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.config import (
    ClusterConfig,
    Config,
    HostConfig,
    JobConfig,
    load_config,
    parse_config,
)
from ddptui.errors import ConfigError

HOSTS_FILE = Path("/etc/ddptui/hosts.toml")


def _parse(text: str) -> Config:
    return parse_config(text, HOSTS_FILE)


def test_minimal_file_gets_every_default() -> None:
    config = _parse('[[hosts]]\nname = "a"\naddress = "10.0.0.1"\n')

    assert config.path == HOSTS_FILE
    assert config.cluster == ClusterConfig()
    assert config.job == JobConfig()
    assert config.hosts == (HostConfig(name="a", address="10.0.0.1"),)


def test_cluster_defaults_apply_and_hosts_override_them() -> None:
    config = _parse(
        """
        [cluster]
        user = "alice"
        port = 2200
        gpus = "all"
        workdir = "/scratch/runs"

        [[hosts]]
        name = "a"
        address = "10.0.0.1"

        [[hosts]]
        name = "b"
        address = "10.0.0.2"
        port = 22
        gpus = [1, 3]
        """
    )

    a, b = config.hosts
    assert (a.user, a.port, a.gpus, a.workdir) == ("alice", 2200, "all", "/scratch/runs")
    assert (b.user, b.port, b.gpus, b.workdir) == ("alice", 22, (1, 3), "/scratch/runs")


def test_env_tables_merge_host_over_cluster() -> None:
    config = _parse(
        """
        [cluster]
        env = { NCCL_DEBUG = "WARN", OMP_NUM_THREADS = "4" }

        [[hosts]]
        name = "a"
        address = "10.0.0.1"
        env = { NCCL_DEBUG = "INFO", NCCL_IB_DISABLE = "1" }

        [[hosts]]
        name = "b"
        address = "10.0.0.2"
        """
    )

    assert config.host("a").env == {
        "NCCL_DEBUG": "INFO",
        "OMP_NUM_THREADS": "4",
        "NCCL_IB_DISABLE": "1",
    }
    assert config.host("b").env == {"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "4"}


def test_a_host_choosing_conda_replaces_the_cluster_python() -> None:
    config = _parse(
        """
        [cluster]
        python = "/opt/py/bin/python"

        [[hosts]]
        name = "a"
        address = "10.0.0.1"
        conda_env = "pt"

        [[hosts]]
        name = "b"
        address = "10.0.0.2"
        """
    )

    assert (config.host("a").conda_env, config.host("a").python) == ("pt", HostConfig.python)
    assert (config.host("b").conda_env, config.host("b").python) == (None, "/opt/py/bin/python")


def test_local_paths_expand_home_and_variables_remote_paths_keep_tilde(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", "/home/alice")
    monkeypatch.setenv("KEYS", "/vault/keys")
    config = _parse(
        """
        [cluster]
        identity_file = "${KEYS}/id_ed25519"
        known_hosts = "~/.ssh/known_hosts"
        python = "~/miniconda3/bin/python"
        workdir = "~/runs"

        [[hosts]]
        name = "a"
        address = "10.0.0.1"

        [[hosts]]
        name = "b"
        address = "10.0.0.2"
        identity_file = "$HOME/.ssh/b_key"
        known_hosts = "keys/known_hosts"
        """
    )

    a, b = config.hosts
    assert a.identity_file == Path("/vault/keys/id_ed25519")
    assert a.known_hosts == Path("/home/alice/.ssh/known_hosts")
    assert (a.python, a.workdir) == ("~/miniconda3/bin/python", "~/runs")
    assert b.identity_file == Path("/home/alice/.ssh/b_key")
    assert b.known_hosts == HOSTS_FILE.parent / "keys/known_hosts"


def test_unset_variable_in_a_host_path_names_host_key_and_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DDPTUI_NO_SUCH", raising=False)

    with pytest.raises(ConfigError) as raised:
        _parse('[[hosts]]\nname = "a"\naddress = "h"\nknown_hosts = "${DDPTUI_NO_SUCH}/kh"\n')

    assert str(raised.value).startswith(
        f'{HOSTS_FILE}: [[hosts]] #1 "a": known_hosts: $DDPTUI_NO_SUCH is not set'
    )


def test_rank0_host_is_node_0_and_the_rest_keep_file_order() -> None:
    config = _parse(
        """
        [[hosts]]
        name = "a"
        address = "10.0.0.1"
        [[hosts]]
        name = "b"
        address = "10.0.0.2"
        [[hosts]]
        name = "c"
        address = "10.0.0.3"
        rank0 = true
        """
    )

    assert [host.name for host in config.hosts] == ["a", "b", "c"]
    assert [host.name for host in config.ordered_hosts] == ["c", "a", "b"]


def test_values_get_the_dataclass_types() -> None:
    config = _parse(
        """
        [cluster]
        connect_timeout = 3
        torch_import_timeout = 45
        min_free_disk_gb = 0
        master_port = "auto"
        backend = "gloo"
        socket_ifname = "eth0"

        [[hosts]]
        name = "cpu-1"
        address = "fe80::1%eth0"
        gpus = 0

        [job]
        nproc_per_node = 4
        checkpoint_every = 50
        args = ["--epochs", "1"]
        """
    )

    assert config.cluster == ClusterConfig(
        master_port="auto",
        backend="gloo",
        connect_timeout=3.0,
        torch_import_timeout=45.0,
        min_free_disk_gb=0.0,
    )
    assert isinstance(config.cluster.connect_timeout, float)
    assert isinstance(config.cluster.torch_import_timeout, float)
    assert config.hosts[0].gpus == 0
    assert config.hosts[0].socket_ifname == "eth0"
    assert config.job == JobConfig(nproc_per_node=4, checkpoint_every=50, args=("--epochs", "1"))


def test_same_address_on_different_ports_is_two_machines() -> None:
    config = _parse(
        '[[hosts]]\nname = "a"\naddress = "nat.example"\nport = 2201\n'
        '[[hosts]]\nname = "b"\naddress = "NAT.example."\nport = 2202\n'
    )

    assert [host.port for host in config.hosts] == [2201, 2202]


def test_same_address_in_other_spelling_is_a_duplicate() -> None:
    with pytest.raises(ConfigError, match=r'#2 "b": address: \[\[hosts\]\] #1 "a" already uses'):
        _parse(
            '[[hosts]]\nname = "a"\naddress = "::1"\n'
            '[[hosts]]\nname = "b"\naddress = "0:0:0:0:0:0:0:1"\n'
        )


def test_load_config_reads_utf8_with_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "hosts.toml"
    path.write_bytes(b'\xef\xbb\xbf[[hosts]]\nname = "a"\naddress = "h"\n')

    config = load_config(path)

    assert config.path == path
    assert config.hosts[0].name == "a"


def test_load_config_places_relative_paths_next_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "hosts.toml").write_text(
        '[cluster]\nidentity_file = "id_key"\n[[hosts]]\nname = "a"\naddress = "h"\n',
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)

    config = load_config("conf/hosts.toml")

    assert config.path == tmp_path / "conf" / "hosts.toml"
    assert config.hosts[0].identity_file == tmp_path / "conf" / "id_key"
