"""The probe's stdout read into :class:`~ddptui.probe.facts.HostFacts`.

A missing, null or mistyped field becomes ``NA`` instead of an exception, so one odd host or
driver never breaks a check; only output that is not a probe document at all raises
:class:`ProbeError`.
"""

from __future__ import annotations

import json
from typing import Any, Final

from ddptui.probe.facts import HostFacts
from ddptui.probe.fields import address_or_none, parsed_items, text_or_empty, typed_field
from ddptui.probe.sections import (
    read_disk,
    read_gpus,
    read_interfaces,
    read_kernel_log,
    read_master,
    read_packages,
    read_port,
    read_python,
    read_torch,
    read_workdir,
    read_workdir_identity,
)
from ddptui.untrusted import plain

PROBE_VERSION: Final = 1
"""The ``probe_version`` this parser reads; the probe (:mod:`ddptui.onhost.probe`) prints the
same number."""

MAX_DOCUMENT_CHARS: Final = 16 * 1024 * 1024
"""Longer output is not a probe document (a real one is tens of KiB, package lists included)."""


class ProbeError(Exception):
    """The probe's output is not a probe document (garbage, truncated, another version)."""


def parse_facts(text: str) -> HostFacts:
    """Parse the probe's stdout. Raises :class:`ProbeError` if it is not a probe document."""
    doc = _load_document(text)
    version = doc.get("probe_version")
    if version != PROBE_VERSION:
        raise ProbeError(
            f"probe reported probe_version {version!r}, this ddptui reads {PROBE_VERSION}"
        )
    errors: dict[str, str] = {}

    def section(name: str) -> dict[str, Any]:
        value = doc.get(name)
        if not isinstance(value, dict):
            errors[name] = "missing from the probe's output"
            return {}
        if isinstance(value.get("error"), str):
            errors[name] = value["error"]
            return {}
        return value

    host = section("host")
    packages = section("packages")
    system = section("system")
    return HostFacts(
        hostname=typed_field(host, "hostname", str),
        fqdn=typed_field(host, "fqdn", str),
        resolved=tuple(parsed_items(host.get("addresses"), address_or_none)),
        resolve_error=text_or_empty(host.get("resolve_error")),
        interfaces=read_interfaces(section("interfaces")),
        python=read_python(section("python")),
        torch=read_torch(doc.get("torch")),
        gpus=read_gpus(section("gpus")),
        kernel_log=read_kernel_log(doc.get("kernel_log")),
        disk=read_disk(section("disk")),
        workdir=read_workdir(doc.get("workdir"), errors),
        workdir_identity=read_workdir_identity(doc.get("workdir_id")),
        cpu_count=typed_field(system, "cpu_count", int),
        memory_total_bytes=typed_field(system, "memory_total_bytes", int),
        memory_available_bytes=typed_field(system, "memory_available_bytes", int),
        pip_packages=read_packages(packages.get("pip")),
        conda_packages=None if packages.get("conda") is None else read_packages(packages["conda"]),
        port=read_port(doc.get("port")),
        master=read_master(doc.get("master")),
        time=typed_field(doc, "time", float),
        section_errors=errors,
    )


def _load_document(text: str) -> dict[str, Any]:
    if len(text) > MAX_DOCUMENT_CHARS:
        raise ProbeError(f"the probe printed more than {MAX_DOCUMENT_CHARS} characters")
    # A login shell may print banners before the probe runs; the document is the last line.
    candidates = [text, *text.strip().splitlines()[-1:]]
    for candidate in candidates:
        try:
            doc = json.loads(candidate)
        except ValueError:
            continue
        except RecursionError:
            # Arrays or objects nested thousands deep: never a probe document.
            raise ProbeError("the probe printed JSON nested too deeply to read") from None
        if isinstance(doc, dict):
            return doc
    snippet = plain(text.strip(), limit=200, one_line=True) or "(no output)"
    raise ProbeError(f"the probe did not print a JSON document; it printed: {snippet}")
