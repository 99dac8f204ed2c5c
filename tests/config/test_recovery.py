"""``[recovery]`` and spare hosts: what they load into, each mistake's one line, and the
resolved file loading back the same."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import pytest

from ddptui.config import (
    Config,
    HostConfig,
    RecoveryConfig,
    config_to_dict,
    config_to_toml,
    parse_config,
)
from ddptui.errors import ConfigError
from tests.config.test_errors import TWO_HOSTS, B

HOSTS_FILE = Path("/etc/ddptui/hosts.toml")
HEALING = """
[recovery]
mode = "resume"
max_restarts = 3
window_s = 600
min_nodes = 2
elastic = true
notify = ["/usr/local/bin/page-me", "--team", "ml"]

[[hosts]]
name = "gpu-a"
address = "10.0.0.1"

[[hosts]]
name = "gpu-e"
address = "10.0.0.15"
spare = true

[[hosts]]
name = "gpu-b"
address = "10.0.0.2"
rank0 = true

[[hosts]]
name = "gpu-c"
address = "10.0.0.3"

[[hosts]]
name = "gpu-f"
address = "10.0.0.16"
spare = true
"""
SLURM = "[slurm]\nnodes = 2\n[job]\nnproc_per_node = 1\n"


def _parse(text: str) -> Config:
    return parse_config(text, HOSTS_FILE, shown="hosts.toml")


def _recovery(lines: str) -> str:
    return f"[recovery]\n{lines}\n{TWO_HOSTS}"


def _names(hosts: Iterable[HostConfig]) -> list[str]:
    return [host.name for host in hosts]


def test_every_recovery_key_loads_into_its_field() -> None:
    recovery = _parse(HEALING).recovery

    assert recovery == RecoveryConfig(
        mode="resume",
        max_restarts=3,
        window_s=600.0,
        min_nodes=2,
        elastic=True,
        notify=("/usr/local/bin/page-me", "--team", "ml"),
    )
    assert recovery.on


def test_without_recovery_a_failed_run_stays_failed_and_never_shrinks() -> None:
    recovery = _parse(TWO_HOSTS).recovery

    assert recovery == RecoveryConfig()
    assert (recovery.mode, recovery.on, recovery.notify) == ("off", False, ())
    assert not _parse(_recovery("max_restarts = 0")).recovery.on


def test_spares_are_checked_hosts_but_no_run_s_nodes() -> None:
    config = _parse(HEALING)

    assert _names(config.hosts) == ["gpu-a", "gpu-e", "gpu-b", "gpu-c", "gpu-f"]
    assert _names(config.ordered_hosts) == ["gpu-b", "gpu-a", "gpu-c"]
    assert _names(config.spares) == ["gpu-e", "gpu-f"]
    assert config.head.name == "gpu-b"
    assert config.host("gpu-f").spare and not config.host("gpu-a").spare


def test_node_0_is_the_first_host_that_is_not_a_spare() -> None:
    config = _parse('[[hosts]]\nname = "s"\naddress = "10.0.0.9"\nspare = true\n' + TWO_HOSTS)

    assert config.head.name == "gpu-a"
    assert _names(config.ordered_hosts) == ["gpu-a", "gpu-b"]
    assert _names(config.spares) == ["s"]


def test_node_0_is_never_a_spare_even_one_built_marked_rank0() -> None:
    config = _parse(TWO_HOSTS)
    spare = HostConfig(name="s", address="10.0.0.9", rank0=True, spare=True)

    built = replace(config, hosts=(spare, *config.hosts))

    assert built.head.name == "gpu-a"
    assert _names(built.ordered_hosts) == ["gpu-a", "gpu-b"]
    assert built.host("s") is spare


def test_a_slurm_cluster_takes_every_recovery_key() -> None:
    config = _parse(
        '[recovery]\nmode = "resume"\nmax_restarts = 2\nwindow_s = 60.0\nnotify = ["page"]\n'
        + SLURM
    )

    assert config.recovery == RecoveryConfig("resume", 2, 60.0, notify=("page",))
    assert config.spares == ()


def test_a_run_may_go_on_with_fewer_nodes_only_when_asked() -> None:
    assert _parse(TWO_HOSTS).recovery.min_nodes is None
    config = _parse(_recovery("min_nodes = 1\nelastic = true"))

    assert config.recovery.min_nodes == 1 and config.recovery.elastic


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _recovery('mod = "resume"'),
            '[recovery]: unknown key "mod" — did you mean "mode"?',
        ),
        (
            _recovery('mode = "on"'),
            '[recovery]: mode: expected "off" or "resume", found "on" (a string)',
        ),
        (
            _recovery("mode = true"),
            '[recovery]: mode: expected "off" or "resume", found true (a boolean)',
        ),
        (
            _recovery("max_restarts = -1"),
            "[recovery]: max_restarts: expected a number of restarts ≥ 0, found -1 (an integer)",
        ),
        (
            _recovery("max_restarts = 2.5"),
            "[recovery]: max_restarts: expected a number of restarts ≥ 0, found 2.5 (a float)",
        ),
        (
            _recovery("window_s = 0"),
            "[recovery]: window_s: expected a number of seconds > 0, found 0 (an integer)",
        ),
        (
            _recovery('window_s = "1h"'),
            '[recovery]: window_s: expected a number of seconds > 0, found "1h" (a string)',
        ),
        (
            _recovery("min_nodes = 0"),
            "[recovery]: min_nodes: expected a number of nodes ≥ 1, found 0 (an integer)",
        ),
        (
            _recovery("min_nodes = 3"),
            "[recovery]: min_nodes: 3, more than the 2 host(s) a run starts on; a run goes on "
            "with fewer nodes, down to min_nodes",
        ),
        (
            _recovery('elastic = "yes"'),
            '[recovery]: elastic: expected true or false, found "yes" (a string)',
        ),
        (
            f"[recovery]\nmin_nodes = 1\n{SLURM}",
            "[recovery]: min_nodes: a Slurm run goes on on spare_nodes; leave it out",
        ),
        (
            SLURM.replace("nodes = 2\n", "nodes = 2\nspare_nodes = 1\n"),
            '[slurm]: spare_nodes: for [recovery] mode = "resume" to run on; set it',
        ),
        (
            '[recovery]\nmode = "resume"\n'
            + SLURM.replace("nodes = 2\n", "nodes = 2\nspare_nodes = -1\n"),
            "[slurm]: spare_nodes: expected a number of nodes ≥ 0, found -1 (an integer)",
        ),
        (
            _recovery('notify = "page-me --team ml"'),
            "[recovery]: notify: expected a command as an array of its words, such as "
            '["/usr/local/bin/page-me", "--team"], found "page-me --team ml" (a string)',
        ),
        (
            _recovery("notify = []"),
            "[recovery]: notify: expected a command as an array of its words, such as "
            '["/usr/local/bin/page-me", "--team"], found [] (an array)',
        ),
        (
            _recovery('notify = ["page-me", ""]'),
            '[recovery]: notify[1]: expected a non-empty string, found "" (a string)',
        ),
        (
            _recovery('notify = ["page-me", 3]'),
            "[recovery]: notify[1]: expected a string, found 3 (an integer)",
        ),
        (
            _recovery('notify = ["page-me\\nrm"]'),
            "[recovery]: notify[0]: expected a string without control characters",
        ),
        (f"recovery = 3\n{TWO_HOSTS}", "recovery: expected a table ([recovery]), found 3"),
        (f"[recover]\nmode = 'resume'\n{TWO_HOSTS}", 'unknown top-level key "recover" — did you'),
        (f'mode = "resume"\n{TWO_HOSTS}', '"mode" must be inside the [recovery] table'),
        (
            f"[cluster]\nmax_restarts = 3\n{TWO_HOSTS}",
            '[cluster]: "max_restarts" belongs in [recovery]',
        ),
        (f"{TWO_HOSTS}[job]\nmax_restarts = 3\n", '[job]: "max_restarts" belongs in [recovery]'),
        (
            _recovery("hang_timeout_s = 60"),
            '[recovery]: "hang_timeout_s" belongs in [job]',
        ),
        (
            _recovery("spare = true"),
            '[recovery]: "spare" is per host: set it in each [[hosts]] entry',
        ),
        (
            f"[cluster]\nspare = true\n{TWO_HOSTS}",
            '[cluster]: "spare" is per host: set it in each [[hosts]] entry',
        ),
        (f'{TWO_HOSTS}spare = "yes"\n', f'{B}: spare: expected true or false, found "yes"'),
        (
            f"{TWO_HOSTS}spare = true\nrank0 = true\n",
            f"{B}: spare: node 0 (rank0 = true) starts every run, so it cannot wait as a spare; "
            "set one of the two",
        ),
        (
            TWO_HOSTS.replace('"\n\n', '"\nspare = true\n\n') + "spare = true\n",
            "no hosts to run on: every [[hosts]] entry is spare = true, and a spare only takes "
            "the place of a run's node; make one of them an ordinary host",
        ),
        ("[slurm]\nnodes = 2\nmax_restarts = 1\n", '[slurm]: "max_restarts" belongs in [recovery]'),
    ],
)
def test_each_mistake_is_one_line_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _parse(text)
    assert str(raised.value).startswith(f"hosts.toml: {message}"), str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_resolved_file_loads_back_as_the_same_configuration() -> None:
    healing = parse_config(HEALING, HOSTS_FILE)
    # Node 0 first, the others in file order and the spares last: the order it is written in.
    config = replace(healing, hosts=healing.ordered_hosts + healing.spares)

    text = config_to_toml(config)

    assert parse_config(text, HOSTS_FILE) == config
    assert '\n[recovery]\nmode = "resume"\nmax_restarts = 3\nwindow_s = 600.0\n' in text
    spare = "# a spare: it takes a node's place when one is set aside\n[[hosts]]\nname ="
    assert text.count(spare) == 2


def test_in_any_file_order_the_run_s_hosts_spares_and_recovery_load_back() -> None:
    config = _parse(HEALING)

    again = parse_config(config_to_toml(config), HOSTS_FILE)

    assert again.ordered_hosts == config.ordered_hosts
    assert again.spares == config.spares
    assert again.recovery == config.recovery
    assert config_to_dict(again) == config_to_dict(config)


def test_without_notify_the_resolved_file_says_it_is_not_set() -> None:
    config = _parse(TWO_HOSTS)

    text = config_to_toml(config)

    assert '\n[recovery]\nmode = "off"\n' in text and "\n# notify: not set\n" in text
    assert parse_config(text, HOSTS_FILE).recovery == RecoveryConfig()


def test_a_slurm_cluster_s_recovery_loads_back() -> None:
    config = _parse(f'[recovery]\nmode = "resume"\nnotify = ["page"]\n{SLURM}')

    again = parse_config(config_to_toml(config), HOSTS_FILE)

    assert again.recovery == config.recovery
    assert config_to_dict(again)["recovery"]["notify"] == ["page"]


def test_json_lists_spares_after_the_run_s_nodes_without_a_node_rank() -> None:
    data = config_to_dict(_parse(HEALING))

    assert [(host["node_rank"], host["name"], host["spare"]) for host in data["hosts"]] == [
        (0, "gpu-b", False),
        (1, "gpu-a", False),
        (2, "gpu-c", False),
        (None, "gpu-e", True),
        (None, "gpu-f", True),
    ]
    assert data["recovery"] == {
        "mode": "resume",
        "max_restarts": 3,
        "window_s": 600.0,
        "min_nodes": 2,
        "elastic": True,
        "notify": ["/usr/local/bin/page-me", "--team", "ml"],
    }
