"""Arbitrary input never escapes as a traceback: it loads, or it is one ConfigError."""

from __future__ import annotations

import copy
import datetime
import re
from pathlib import Path
from typing import Any

import tomli_w
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from ddptui.config import (
    CLUSTER_KEYS,
    HOST_KEYS,
    JOB_KEYS,
    RECOVERY_KEYS,
    Config,
    config_to_dict,
    config_to_toml,
    load_config,
    parse_config,
)
from ddptui.errors import ConfigError

HOSTS_FILE = Path("/nonexistent/ddptui/hosts.toml")
VARIABLE = re.compile(r"\$[{A-Za-z_]")
REAL_KEYS = sorted(
    {*CLUSTER_KEYS, *HOST_KEYS, *JOB_KEYS, *RECOVERY_KEYS, "cluster", "hosts", "job", "recovery"}
)
# Values that pass some validator, so generated files get past the type checks and reach
# the cross-checks (duplicates, rank0, gpus vs nproc_per_node) and the success path.
PLAUSIBLE = [
    "all", "auto", "gpus", "nccl", "gloo", "eth0", "python3", "~/runs", "~/.ssh/id",
    "$HOME/x", "${HOME}/y", "$DDPTUI_UNSET_VAR/z", "relative/path", "alice", "gpu-a", "gpu-b",
    "10.0.0.1", "::1", "node.example", 0, 1, 2, 22, 29500, 65535, 65536, -1, 0.5, True, False,
    [0, 1], [1, 1], [], ["--epochs", "1"], {"NCCL_DEBUG": "WARN"}, {"1X": "y"}, "resume", "off",
    ["page-me", "--team", "ml"], [""], 3600,
]  # fmt: skip

keys = st.one_of(st.sampled_from(REAL_KEYS), st.text(min_size=1, max_size=12))
scalars = st.one_of(
    st.sampled_from(PLAUSIBLE),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.text(max_size=20),
    st.dates(),
    st.times(),
    st.datetimes(min_value=datetime.datetime(1, 1, 1, 0, 0, 1)),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)
tables = st.dictionaries(keys, values, max_size=6)
host_entries = st.builds(
    lambda name, address, rest: {**name, **address, **rest},
    st.one_of(st.just({}), st.sampled_from(["a", "b", "gpu-1", "B"]).map(lambda v: {"name": v})),
    st.one_of(st.just({}), st.sampled_from(["h1", "h2", "::1"]).map(lambda v: {"address": v})),
    tables,
)
random_documents = st.builds(
    lambda sections, extra: {**extra, **sections},
    st.fixed_dictionaries(
        {},
        optional={
            "cluster": st.one_of(tables, values),
            "hosts": st.one_of(st.lists(host_entries, max_size=4), values),
            "job": st.one_of(tables, values),
            "recovery": st.one_of(tables, values),
        },
    ),
    st.dictionaries(keys, values, max_size=2),
)
VALID_DOCUMENT: dict[str, Any] = {
    "cluster": {"user": "alice", "identity_file": "~/.ssh/id", "env": {"A": "1"}, "port": 2222},
    "hosts": [
        {"name": "a", "address": "10.0.0.1", "gpus": [0, 1], "env": {"B": "2"}},
        {"name": "b", "address": "node-b.example", "conda_env": "pt", "rank0": True},
        {"name": "c", "address": "::1", "port": 22, "python": "~/py/bin/python"},
        {"name": "d", "address": "10.0.0.4", "spare": True},
    ],
    "job": {"nproc_per_node": "gpus", "checkpoint_every": 10, "args": ["--epochs", "1"]},
    "recovery": {"mode": "resume", "notify": ["page-me"]},
}


@st.composite
def mutated_documents(draw: st.DrawFn) -> dict[str, Any]:
    """The valid document with a few of its tables' keys set to other values or removed."""
    document = copy.deepcopy(VALID_DOCUMENT)
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        known, table = draw(st.sampled_from(_tables_in(document)))
        key = draw(st.one_of(st.sampled_from(known), keys))
        if key in table and draw(st.booleans()):
            del table[key]
        else:
            table[key] = draw(st.one_of(st.sampled_from(PLAUSIBLE), values))
    return document


def _tables_in(document: dict[str, Any]) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    found = [
        (CLUSTER_KEYS, document["cluster"]),
        (JOB_KEYS, document["job"]),
        (RECOVERY_KEYS, document["recovery"]),
    ]
    found += ((HOST_KEYS, entry) for entry in document["hosts"])
    return found


def _load_or_reject(text: str) -> Config | None:
    try:
        return parse_config(text, HOSTS_FILE)
    except ConfigError as error:
        message = str(error)
        assert message.startswith(str(HOSTS_FILE)), message
        assert "\n" not in message, message
        return None


def _check_loaded(config: Config) -> None:
    names = [host.name.lower() for host in config.hosts]
    assert names and len(set(names)) == len(names)
    assert sum(host.rank0 for host in config.hosts) <= 1
    assert not config.head.spare and len(config.ordered_hosts) + len(config.spares) == len(names)
    local_paths = [
        str(path) for host in config.hosts for path in (host.identity_file, host.known_hosts)
    ]
    # A "$NAME" that survived expansion (it came from a variable's value) would expand again.
    assume(not any(VARIABLE.search(path) for path in local_paths))
    reloaded = parse_config(config_to_toml(config), HOSTS_FILE)
    assert config_to_dict(reloaded) == config_to_dict(config)


@settings(max_examples=200, deadline=None)
@given(random_documents)
def test_any_toml_document_loads_or_is_one_config_error(document: dict[str, Any]) -> None:
    _load_and_check(document)


@settings(max_examples=200, deadline=None)
@given(mutated_documents())
def test_a_valid_document_with_random_edits_loads_or_is_one_config_error(
    document: dict[str, Any],
) -> None:
    _load_and_check(document)


def _load_and_check(document: dict[str, Any]) -> None:
    config = _load_or_reject(tomli_w.dumps(document))
    event("loaded" if config is not None else "rejected")
    if config is not None:
        _check_loaded(config)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet='[]{}=".,#\n\t -_0123456789abcdefhnostu~$')))
def test_any_text_loads_or_is_one_config_error(text: str) -> None:
    _load_or_reject(text)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_any_bytes_on_disk_load_or_are_one_config_error(tmp_path_factory: Any, data: bytes) -> None:
    path = tmp_path_factory.getbasetemp() / "fuzz-hosts.toml"
    path.write_bytes(data)
    try:
        load_config(path)
    except ConfigError as error:
        assert str(error).startswith(str(path))
