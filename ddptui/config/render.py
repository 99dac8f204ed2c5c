"""A resolved :class:`~ddptui.config.model.Config` as data and as text.

:func:`config_to_dict` is the stable JSON shape of ``ddptui config --json``::

    {"path": str,
     "cluster": {every ClusterConfig field},
     "hosts": [{"name", "node_rank", every other HostConfig field}, ...],   # node-rank order
     "job": {every JobConfig field},
     "recovery": {every RecoveryConfig field}}

Paths are strings, unset values ``null``, ``gpus`` is ``"all"``, a count or a list. Spares
follow the run's hosts, in file order, with a ``node_rank`` of ``null``.

:func:`config_to_toml` is the human form: a hosts file with every default written out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import tomli_w

from ddptui.config.load import SLURM_CLUSTER_KEYS
from ddptui.config.model import (
    ClusterConfig,
    Config,
    HostConfig,
    JobConfig,
    RecoveryConfig,
    SlurmConfig,
)

_SLURM = frozenset(SLURM_CLUSTER_KEYS)


def config_to_dict(config: Config) -> dict[str, Any]:
    """The resolved configuration as JSON-able data, hosts in node-rank order."""
    if config.slurm is not None:
        assert config.node is not None
        return {
            "path": str(config.path),
            "cluster": {
                **{k: v for k, v in _fields(config.cluster, ClusterConfig).items() if k in _SLURM},
                **_node_fields(config.node),
            },
            "hosts": [],
            "job": _fields(config.job, JobConfig),
            "slurm": _fields(config.slurm, SlurmConfig),
            "recovery": _fields(config.recovery, RecoveryConfig),
        }
    ranks: list[tuple[int | None, HostConfig]] = [*enumerate(config.ordered_hosts)]
    ranks += ((None, spare) for spare in config.spares)
    return {
        "path": str(config.path),
        "cluster": _fields(config.cluster, ClusterConfig),
        "hosts": [
            {"name": host.name, "node_rank": rank, **_fields(host, HostConfig)}
            for rank, host in ranks
        ],
        "job": _fields(config.job, JobConfig),
        "recovery": _fields(config.recovery, RecoveryConfig),
    }


def _node_fields(node: HostConfig) -> dict[str, Any]:
    """A Slurm node's settings, as ``[cluster]`` holds them (the rest are Slurm's)."""
    return {key: value for key, value in _fields(node, HostConfig).items() if key in _SLURM}


def _fields(instance: object, kind: type) -> dict[str, Any]:
    return {field.name: _jsonable(getattr(instance, field.name)) for field in fields(kind)}


def _jsonable(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def config_to_toml(config: Config) -> str:
    """The resolved configuration as a commented hosts file, hosts in node-rank order, then
    the spares.

    Every host lists every effective value; unset ones appear as comments. Loading the text
    gives the same cluster, hosts and job, unless an expanded local path contains a ``$``.
    """
    data = config_to_dict(config)
    lines = [
        f"# {data['path']}, resolved: defaults applied"
        + ("." if "slurm" in data else ", hosts in node-rank order."),
        "",
        "[cluster]",
        *(_setting(key, value) for key, value in data["cluster"].items()),
    ]
    if "slurm" in data:
        lines += ["", "[slurm]", *(_setting(key, value) for key, value in data["slurm"].items())]
    for host in data["hosts"]:
        rank = host.pop("node_rank")
        if rank is None:
            heading = "# a spare: it takes a node's place when one is set aside"
        else:
            heading = f"# node {rank}" + (" (the rendezvous host)" if rank == 0 else "")
        lines += ["", heading, "[[hosts]]"]
        lines += (_host_line(key, value, host) for key, value in host.items())
    lines += ["", "[job]"]
    lines += (_setting(key, value) for key, value in data["job"].items())
    lines += ["", "[recovery]"]
    lines += (_recovery_line(key, value) for key, value in data["recovery"].items())
    return "\n".join(lines) + "\n"


def _setting(key: str, value: object) -> str:
    return f"# {key}: not set" if value is None else assignment(key, value)


def _recovery_line(key: str, value: object) -> str:
    # No command to notify is no notify key: an empty one would not load back.
    return _setting(key, None if key == "notify" and not value else value)


def _host_line(key: str, value: object, host: Mapping[str, object]) -> str:
    if value is None:
        return f"# {key}: not set"
    if key == "python" and host["conda_env"] is not None:
        return f"# {assignment(key, value)}  (not used: conda_env is set)"
    return assignment(key, value)


def assignment(key: str, value: object) -> str:
    """``key = value`` on one line, arrays and tables inline; tomli-w quotes every scalar.

    ``key`` must be a bare TOML key (letters, digits, ``_`` and ``-``).
    """
    return f"{key} = {_inline(value)}"


def _inline(value: object) -> str:
    # tomli-w spreads arrays over several lines and tables into sections; one line per key
    # reads better and lets a comment sit above each key, so only scalars go through it.
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_inline(item) for item in value) + "]"
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        return "{ " + ", ".join(assignment(key, item) for key, item in value.items()) + " }"
    return tomli_w.dumps({"v": value}).removeprefix("v = ").rstrip("\n")
