"""HostConfigs pointing at the test servers, with the keys and known_hosts they trust."""

from __future__ import annotations

import sys
from typing import Any

from ddptui.config.model import HostConfig
from tests.testbed import LocalSshServer, TestBed, TestHost


def local_host(server: LocalSshServer, **overrides: Any) -> HostConfig:
    fields: dict[str, Any] = {
        "name": "local",
        "address": server.host,
        "port": server.port,
        "user": server.user,
        "identity_file": server.client_key,
        "known_hosts": server.known_hosts,
        "python": sys.executable,
    }
    return HostConfig(**{**fields, **overrides})


def bed_host(bed: TestBed, host: TestHost, **overrides: Any) -> HostConfig:
    fields: dict[str, Any] = {
        "name": host.name,
        "address": host.address,
        "user": bed.user,
        "identity_file": bed.identity_file,
        "known_hosts": bed.known_hosts,
        "python": bed.python,
        "workdir": str(host.workdir),
    }
    return HostConfig(**{**fields, **overrides})
