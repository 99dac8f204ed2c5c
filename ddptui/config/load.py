"""Read a hosts file and turn it into a :class:`~ddptui.config.model.Config`, or say why not.

Every problem becomes one :class:`~ddptui.errors.ConfigError` whose message starts with the
file, then where in it (``[cluster]``, ``[[hosts]] #2 "gpu-b"``, ``[job]``) and the key:
``hosts.toml: [[hosts]] #2 "gpu-b": port: expected an integer 1–65535, found "22" (a string)``.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import os
import re
import shlex
import sys
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from ddptui.config import values
from ddptui.config.found import describe
from ddptui.config.model import (
    ClusterConfig,
    Config,
    HostConfig,
    JobConfig,
    RecoveryConfig,
    SlurmConfig,
)
from ddptui.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

MACHINE_KEYS: tuple[str, ...] = (
    "user",
    "port",
    "identity_file",
    "known_hosts",
    "python",
    "conda_env",
    "workdir",
    "env",
    "gpus",
    "socket_ifname",
)
"""Keys that describe one machine: set in ``[cluster]`` as defaults, overridable per host."""

_HOST_ONLY: dict[str, values.Validator] = {
    "name": values.name,
    "address": values.address,
    "rank0": values.true_or_false,
    "spare": values.true_or_false,
}
_REQUIRED_HOST_KEYS = ("name", "address")
_CLUSTER_ONLY: dict[str, values.Validator] = {
    "master_port": values.master_port,
    "backend": values.backend,
    "connect_timeout": values.seconds,
    "torch_import_timeout": values.seconds,
    "max_parallel_connects": values.max_parallel_connects,
    "min_free_disk_gb": values.min_free_disk_gb,
    "max_clock_skew_s": values.seconds,
}
_JOB_FIXED: dict[str, values.Validator] = {
    "nproc_per_node": values.nproc_per_node,
    "checkpoint_every": values.checkpoint_every,
    "args": values.args,
    "module": values.module,
    "resume_args": values.args,
    "stop_grace_s": values.seconds,
    "hang_timeout_s": values.seconds,
    "on_hang": values.on_hang,
    "exclude": values.patterns,
    "max_upload_mb": values.max_upload_mb,
    "loss_pattern": values.loss_pattern,
    "instrument": values.true_or_false,
    "checkpoint_files": values.relative_globs,
    "memory_per_process_gb": values.memory_per_process_gb,
}
_JOB_KEY_ORDER = (
    "nproc_per_node",
    "checkpoint_every",
    "args",
    "script",
    "module",
    "dir",
    "exclude",
    "max_upload_mb",
    "loss_pattern",
    "instrument",
    "checkpoint_files",
    "memory_per_process_gb",
    "resume_args",
    "stop_grace_s",
    "hang_timeout_s",
    "on_hang",
)
_SLURM: dict[str, values.Validator] = {
    "nodes": values.slurm_nodes,
    "spare_nodes": values.spare_nodes,
    "gpus_per_node": values.gpus_per_node,
    "partition": values.slurm_name,
    "time": values.slurm_time,
    "account": values.slurm_name,
    "qos": values.slurm_name,
    "constraint": values.slurm_constraint,
    "exclude": values.slurm_exclude,
    "sbatch_args": values.sbatch_args,
}
_RECOVERY: dict[str, values.Validator] = {
    "mode": values.recovery_mode,
    "max_restarts": values.max_restarts,
    "window_s": values.seconds,
    "min_nodes": values.min_nodes,
    "elastic": values.true_or_false,
    "notify": values.command,
}
_NOT_FOR_SLURM = {
    "gpus": "Slurm picks a node's GPUs; set [slurm] gpus_per_node",
    "master_port": "a Slurm run's port comes from its job id, so that jobs sharing a node "
    "do not collide; leave it out",
}
SLURM_CLUSTER_KEYS: tuple[str, ...] = tuple(
    key for key in (*_CLUSTER_ONLY, *MACHINE_KEYS) if key not in _NOT_FOR_SLURM
)
"""The ``[cluster]`` keys of a ``[slurm]`` cluster: every node's settings."""
SLURM_NODE = "slurm-node"
"""The name and address of ``Config.node``: a node is Slurm's to pick."""
CLUSTER_KEYS: tuple[str, ...] = (*MACHINE_KEYS, *_CLUSTER_ONLY)
"""Every key ``[cluster]`` accepts."""
HOST_KEYS: tuple[str, ...] = (*_HOST_ONLY, *MACHINE_KEYS)
"""Every key a ``[[hosts]]`` entry accepts."""
JOB_KEYS: tuple[str, ...] = _JOB_KEY_ORDER
"""Every key ``[job]`` accepts."""
SLURM_KEYS: tuple[str, ...] = tuple(_SLURM)
"""Every key ``[slurm]`` accepts."""
RECOVERY_KEYS: tuple[str, ...] = tuple(_RECOVERY)
"""Every key ``[recovery]`` accepts."""
_TABLES = ("cluster", "hosts", "job", "recovery", "slurm")
_INTERPRETER_KEYS = ("python", "conda_env")
_TOML_POSITION = re.compile(r"^(?P<message>.*) \(at line (?P<line>\d+), column (?P<column>\d+)\)$")
_TOML_AT_END = " (at end of document)"


class _Problem(Exception):
    """A problem located inside the file; the file name is prefixed once, at the top."""


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate the hosts file at ``path``: ``[[hosts]]`` or a ``[slurm]`` cluster,
    as its tables say. What needs hosts of ddptui's own refuses the other kind through the
    kind's cluster (:meth:`ddptui.run.control.RunControl.scan_host_keys`,
    :meth:`~ddptui.run.control.RunControl.require_measurable`).

    Raises:
        ConfigError: the file is missing or unreadable, is not UTF-8 or not TOML, or does
            not follow the schema. The message names the file, the table, the entry and the
            key, with what was expected and what was found.
    """
    shown = os.fspath(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            f"{shown}: no such file (`ddptui init {shlex.quote(shown)}` writes a starter one)"
        ) from None
    except IsADirectoryError:
        raise ConfigError(f"{shown}: is a directory, not a hosts file") from None
    except PermissionError:
        raise ConfigError(f"{shown}: permission denied") from None
    except OSError as error:
        raise ConfigError(f"{shown}: cannot read: {error.strerror or error}") from None
    except ValueError:
        raise ConfigError(f"{shown!r}: not a valid file name") from None
    try:
        # utf-8-sig: some editors start UTF-8 files with a byte-order mark TOML does not allow.
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - data.rfind(b"\n", 0, error.start)
        raise ConfigError(
            f"{shown}:{line}:{column}: not UTF-8 text (byte 0x{data[error.start]:02x}); "
            "save the file as UTF-8"
        ) from None
    return parse_config(text, Path(path), shown=shown)


def parse_config(text: str, path: Path, *, shown: str | None = None) -> Config:
    """Validate hosts-file ``text`` as if read from ``path``; no I/O besides path expansion.

    ``path`` places relative local paths (they are relative to its directory) and becomes
    ``Config.path`` (made absolute); ``shown`` is how messages name the file (default: ``path``).

    Raises:
        ConfigError: as for :func:`load_config`.
    """
    shown = str(path) if shown is None else shown
    document = _parse_toml(text, shown)
    try:
        return _build(document, path.absolute())
    except _Problem as problem:
        raise ConfigError(f"{shown}: {problem}") from None


def _parse_toml(text: str, shown: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(_toml_message(str(error), shown)) from None
    except RecursionError:
        raise ConfigError(f"{shown}: invalid TOML: arrays or tables nested too deeply") from None


def _toml_message(message: str, shown: str) -> str:
    located = _TOML_POSITION.match(message)
    if located:
        reason = _sentence_case(located["message"])
        return f"{shown}:{located['line']}:{located['column']}: invalid TOML: {reason}"
    if message.endswith(_TOML_AT_END):
        reason = _sentence_case(message.removesuffix(_TOML_AT_END))
        return f"{shown}: invalid TOML at the end of the file: {reason}"
    return f"{shown}: invalid TOML: {_sentence_case(message)}"


def _sentence_case(message: str) -> str:
    return message[:1].lower() + message[1:]


def _build(document: dict[str, Any], path: Path) -> Config:
    _reject_unknown(document, _TABLES, "", _TOP_LEVEL_HOMES)
    cluster_table = _table(document, "cluster", "[cluster]")
    job_table = _table(document, "job", "[job]")
    machine = _machine_validators(path.parent)

    settings = _validate(cluster_table, "[cluster]", {**machine, **_CLUSTER_ONLY}, _CLUSTER_HOMES)
    _one_interpreter(cluster_table, "[cluster]")
    cluster = ClusterConfig(**{k: v for k, v in settings.items() if k in _CLUSTER_ONLY})
    defaults = {key: value for key, value in settings.items() if key in MACHINE_KEYS}
    local_path = values.local_path(path.parent)
    job_validators = {**_JOB_FIXED, "script": local_path, "dir": local_path}
    job = JobConfig(**_validate(job_table, "[job]", job_validators, _JOB_HOMES))
    if job.script is not None and job.module is not None:
        raise _Problem("[job]: set script or module, not both: each names what every rank runs")
    if job.dir is not None and job.script is None and job.module is None:
        raise _Problem("[job]: dir is uploaded for a script or a module; set one of them")
    if job.script is not None and job.dir is not None and not job.script.is_relative_to(job.dir):
        raise _Problem(
            f"[job]: script {job.script} is not inside dir {job.dir}: the ranks run it from there"
        )
    recovery_table = _table(document, "recovery", "[recovery]")
    recovery = RecoveryConfig(**_validate(recovery_table, "[recovery]", _RECOVERY, _RECOVERY_HOMES))
    if "slurm" in document:
        slurm = _slurm(document, cluster_table, job, recovery)
        node = HostConfig(name=SLURM_NODE, address=SLURM_NODE, **defaults)
        return Config(path, cluster, (), job, slurm=slurm, node=node, recovery=recovery)
    hosts = tuple(
        _host(entry, number, defaults, machine)
        for number, entry in enumerate(_host_entries(document), start=1)
    )
    _check_hosts_together(hosts, job, recovery)
    return Config(path=path, cluster=cluster, hosts=hosts, job=job, recovery=recovery)


def _slurm(
    document: dict[str, Any], cluster: Mapping[str, Any], job: JobConfig, recovery: RecoveryConfig
) -> SlurmConfig:
    if "hosts" in document:
        raise _Problem(
            "[slurm] and [[hosts]]: Slurm picks the nodes of a [slurm] cluster; "
            "keep [slurm] or the [[hosts]] entries, not both"
        )
    table = _table(document, "slurm", "[slurm]")
    if "nodes" not in table:
        raise _Problem("[slurm]: nodes: missing; how many nodes each run takes")
    for key, why in _NOT_FOR_SLURM.items():
        if key in cluster:
            raise _Problem(f"[cluster]: {key}: {why}")
    slurm = SlurmConfig(**_validate(table, "[slurm]", _SLURM, _SLURM_HOMES))
    if recovery.min_nodes is not None:
        raise _Problem("[recovery]: min_nodes: a Slurm run goes on on spare_nodes; leave it out")
    if slurm.spare_nodes and not recovery.on:
        raise _Problem('[slurm]: spare_nodes: for [recovery] mode = "resume" to run on; set it')
    if job.nproc_per_node == "gpus" and not slurm.gpus_per_node:
        raise _Problem(
            '[job]: nproc_per_node: "gpus" starts one process per GPU, but [slurm] asks for '
            "no GPUs; set [slurm] gpus_per_node, or nproc_per_node to a number"
        )
    return slurm


def _machine_validators(base_dir: Path) -> dict[str, values.Validator]:
    local_path = values.local_path(base_dir)
    return {
        "user": values.user,
        "port": values.port,
        "identity_file": local_path,
        "known_hosts": local_path,
        "python": values.python,
        "conda_env": values.conda_env,
        "workdir": values.remote_path,
        "env": values.env,
        "gpus": values.gpus,
        "socket_ifname": values.socket_ifname,
    }


def _table(document: dict[str, Any], key: str, header: str) -> dict[str, Any]:
    table = document.get(key, {})
    if not isinstance(table, dict):
        raise _Problem(f"{key}: expected a table ({header}), found {describe(table)}")
    return table


def _host_entries(document: dict[str, Any]) -> list[dict[str, Any]]:
    entries = document.get("hosts", [])
    if not isinstance(entries, list):
        raise _Problem(
            "hosts: expected an array of tables (one [[hosts]] entry per machine), "
            f"found {describe(entries)}"
        )
    if not entries:
        raise _Problem("no hosts: add a [[hosts]] entry with a name and an address per machine")
    for number, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict):
            raise _Problem(f"[[hosts]] #{number}: expected a table, found {describe(entry)}")
    return entries


def _validate(
    table: dict[str, Any],
    where: str,
    validators: Mapping[str, values.Validator],
    homes: Mapping[str, str],
) -> dict[str, Any]:
    _reject_unknown(table, validators, where, homes)
    valid: dict[str, Any] = {}
    for key, validate in validators.items():
        if key in table:
            try:
                valid[key] = validate(table[key])
            except values.Invalid as invalid:
                raise _Problem(f"{where}: {key}{invalid.subkey}: {invalid}") from None
    return valid


def _one_interpreter(table: Mapping[str, Any], where: str) -> None:
    if all(key in table for key in _INTERPRETER_KEYS):
        raise _Problem(
            f"{where}: conda_env: python and conda_env are alternatives; set one of them"
        )


def _reject_unknown(
    table: Mapping[str, Any], known: Collection[str], where: str, homes: Mapping[str, str]
) -> None:
    for key in table:
        if key in known:
            continue
        label = json.dumps(key, ensure_ascii=False)
        prefix = f"{where}: " if where else ""
        if key in homes:
            raise _Problem(f"{prefix}{label} {homes[key]}")
        close = difflib.get_close_matches(key.lower(), list(known), n=1, cutoff=0.6)
        hint = f' — did you mean "{close[0]}"?' if close else f" (valid: {', '.join(known)})"
        kind = "key" if where else "top-level key"
        raise _Problem(f"{prefix}unknown {kind} {label}{hint}")


def _host(
    entry: dict[str, Any],
    number: int,
    defaults: dict[str, Any],
    machine: Mapping[str, values.Validator],
) -> HostConfig:
    where = _entry_label(entry, number)
    validators = {**_HOST_ONLY, **machine}
    _reject_unknown(entry, validators, where, _HOST_HOMES)
    for key in _REQUIRED_HOST_KEYS:
        if key not in entry:
            raise _Problem(f"{where}: {key}: missing; every [[hosts]] entry needs one")
    _one_interpreter(entry, where)
    own = _validate(entry, where, validators, _HOST_HOMES)
    inherited = dict(defaults)
    if any(key in own for key in _INTERPRETER_KEYS):
        # python and conda_env are one choice: a host that picks either replaces the cluster's.
        for key in _INTERPRETER_KEYS:
            inherited.pop(key, None)
    env = {**inherited.get("env", {}), **own.get("env", {})}
    return HostConfig(**{**inherited, **own, "env": env})


def _entry_label(entry: Mapping[str, Any], number: int) -> str:
    try:
        return f'[[hosts]] #{number} "{values.name(entry.get("name"))}"'
    except values.Invalid:
        return f"[[hosts]] #{number}"


def _check_hosts_together(
    hosts: tuple[HostConfig, ...], job: JobConfig, recovery: RecoveryConfig
) -> None:
    names: dict[str, str] = {}
    endpoints: dict[tuple[str, int], str] = {}
    head: str | None = None
    for number, host in enumerate(hosts, start=1):
        where = f'[[hosts]] #{number} "{host.name}"'
        earlier = names.setdefault(host.name.lower(), where)
        if earlier != where:
            raise _Problem(f"{where}: name: {earlier} already uses this name")
        endpoint = (_normal_address(host.address), host.port)
        earlier = endpoints.setdefault(endpoint, where)
        if earlier != where:
            raise _Problem(
                f"{where}: address: {earlier} already uses {host.address} port {host.port}"
            )
        if host.rank0:
            if head is not None:
                raise _Problem(
                    f"{where}: rank0: {head} already sets rank0 = true; only one host is node 0"
                )
            if host.spare:
                raise _Problem(
                    f"{where}: spare: node 0 (rank0 = true) starts every run, so it cannot "
                    "wait as a spare; set one of the two"
                )
            head = where
        if job.nproc_per_node == "gpus" and host.gpus == 0:
            raise _Problem(
                f'{where}: gpus: 0 GPUs, but [job] nproc_per_node = "gpus" starts one process '
                "per GPU; set nproc_per_node to a number"
            )
    starts_on = sum(not host.spare for host in hosts)
    if not starts_on:
        raise _Problem(
            "no hosts to run on: every [[hosts]] entry is spare = true, and a spare only takes "
            "the place of a run's node; make one of them an ordinary host"
        )
    if recovery.min_nodes is not None and recovery.min_nodes > starts_on:
        raise _Problem(
            f"[recovery]: min_nodes: {recovery.min_nodes}, more than the {starts_on} host(s) a "
            "run starts on; a run goes on with fewer nodes, down to min_nodes"
        )


def _normal_address(address: str) -> str:
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address.lower().removesuffix(".")


def _homes(*groups: tuple[Iterable[str], str]) -> dict[str, str]:
    return {key: home for keys, home in groups for key in keys}


_IN_CLUSTER = "is cluster-wide: set it in [cluster]"
_IN_JOB = "belongs in [job]"
_IN_RECOVERY = "belongs in [recovery]"
_IN_HOSTS = "is per host: set it in each [[hosts]] entry"
_IN_A_TABLE = "must be inside a table: [cluster] (a default for every host) or a [[hosts]] entry"
_TOP_LEVEL_HOMES = _homes(
    (_SLURM, "must be inside the [slurm] table"),
    (MACHINE_KEYS, _IN_A_TABLE),
    (_CLUSTER_ONLY, "must be inside the [cluster] table"),
    (_HOST_ONLY, "must be inside a [[hosts]] entry"),
    (JOB_KEYS, "must be inside the [job] table"),
    (_RECOVERY, "must be inside the [recovery] table"),
)
_CLUSTER_HOMES = _homes(
    (_SLURM, "is Slurm's: set it in [slurm]"),
    (_HOST_ONLY, _IN_HOSTS),
    (JOB_KEYS, _IN_JOB),
    (_RECOVERY, _IN_RECOVERY),
)
_HOST_HOMES = _homes((_CLUSTER_ONLY, _IN_CLUSTER), (JOB_KEYS, _IN_JOB), (_RECOVERY, _IN_RECOVERY))
_JOB_HOMES = _homes(
    (MACHINE_KEYS, "is a machine setting: set it in [cluster] or a [[hosts]] entry"),
    (_CLUSTER_ONLY, _IN_CLUSTER),
    (_HOST_ONLY, _IN_HOSTS),
    (_RECOVERY, _IN_RECOVERY),
)
_SLURM_HOMES = _homes(
    (MACHINE_KEYS, "is every node's setting: set it in [cluster]"),
    (_CLUSTER_ONLY, _IN_CLUSTER),
    (JOB_KEYS, _IN_JOB),
    (_RECOVERY, _IN_RECOVERY),
)
_RECOVERY_HOMES = _homes(
    (MACHINE_KEYS, "is a machine setting: set it in [cluster] or a [[hosts]] entry"),
    (_CLUSTER_ONLY, _IN_CLUSTER),
    (_HOST_ONLY, _IN_HOSTS),
    (_SLURM, "is Slurm's: set it in [slurm]"),
    (JOB_KEYS, _IN_JOB),
)
