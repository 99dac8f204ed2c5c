"""Hosts files whose string values are made to break login shells, and what reaches a host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomli_w
from hypothesis import strategies as st

from ddptui.config import Config

# The same without a Python start per run: each argument, then $X_VALUE, NUL-terminated.
PRINTF = 'printf "%s\\0" "$@" "${X_VALUE-unset}"'
HOSTS_FILE = Path("/nonexistent/hosts.toml")

# What breaks shells: quotes, backslashes (fish reads \' inside single quotes), newlines
# (tcsh ends the word), $ ` ! % = ; and friends, and what should be refused outright.
nasty = st.text(
    alphabet=st.one_of(
        st.sampled_from([*"'\"\\\n\t$`!%=;&|<>(){}[]*?~# ", "\x1b", "\x9b", "\u202e", "é"]),
        st.characters(exclude_categories=["Cs"]),
    ),
    min_size=1,
    max_size=24,
)
TRICKY = [
    "it's", "a\\'b", "x\ny", "$(id)", "`id`", "!!", "%x", "a=b", "/opt/py=3.11/bin/python",
    "fe80::1%';id;'", "fe80::1%eth0", "~/p y", "-c", "--", "'", "\\", "\"", ";id;",
]  # fmt: skip

FIELDS = {
    "user": "cluster",
    "identity_file": "cluster",
    "known_hosts": "cluster",
    "python": "cluster",
    "conda_env": "cluster",
    "workdir": "cluster",
    "socket_ifname": "cluster",
    "env": "cluster",
    "name": "host",
    "address": "host",
    "args": "job",
}
"""Every string-valued key of the hosts file, and the table it goes in."""


def hosts_text(field: str, value: str) -> str:
    cluster: dict[str, Any] = {}
    host: dict[str, Any] = {"name": "gpu-a", "address": "10.0.0.1"}
    job: dict[str, Any] = {"nproc_per_node": 1}
    where = {"cluster": cluster, "host": host, "job": job}[FIELDS[field]]
    if field == "env":
        where[field] = {"X_VALUE": value}
    elif field == "args":
        where[field] = ["--flag", value]
    else:
        where[field] = value
    return tomli_w.dumps({"cluster": cluster, "hosts": [host], "job": job})


def remote_values(config: Config) -> tuple[list[str], dict[str, str]]:
    """Every string the hosts file gives one host, and its environment."""
    (host,) = config.hosts
    values = [host.name, host.address, host.python, host.workdir, host.socket_ifname]
    values += [str(path) for path in (host.identity_file, host.known_hosts) if path is not None]
    values += [text for text in (host.user, host.conda_env) if text is not None]
    values += list(config.job.args)
    return values, dict(host.env)
