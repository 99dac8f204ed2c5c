"""A recent healthy check of a hosts file, kept so that the next launch of the same file may
stand on it instead of checking again.

A launch's check costs an SSH login, a probe, a shared-workdir test and a port test on every
host: on a small cluster most of what ddptui adds to typing torchrun by hand. A check that
found the cluster healthy a few minutes ago, of the same hosts file, by the same probe, says
what a new one would unless something changed on the hosts since; the one change ddptui can
know of, a run of its own started since (its GPUs and ports now taken), is the caller's to
rule out (:meth:`ddptui.run.control.RunControl.recent_check`). What else may change (another
user takes the GPUs) the launch's own start meets, as it would seconds after a fresh check.

Kept as one JSON file per hosts file under ``$XDG_STATE_HOME/ddptui/checks``: the probe's
output per host as it came (parsed again, as untrusted as it was then, when reused) and what
the check measured around it. Only a healthy check is kept; a check that is not healthy
removes the one kept, so a launch after it checks again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddptui.atomic import make_dirs, write_atomic
from ddptui.check.report import CheckReport, PortTest
from ddptui.config.model import Config
from ddptui.config.render import config_to_toml
from ddptui.health import HostCheck, evaluate
from ddptui.probe import PROBE_SOURCE
from ddptui.probe.facts import HostFacts
from ddptui.probe.parse import ProbeError, parse_facts
from ddptui.remote.status import Reach, Reachability

REUSE_S = 300.0
"""How old a check may be and still stand for a new one."""

_VERSION = 1


@dataclass(frozen=True)
class RecentCheck:
    """A kept check, read back as a report of the hosts file it was made of."""

    report: CheckReport
    checked_at: float
    """When it was made (Unix seconds)."""


def key(config: Config) -> str:
    """What a kept check is filed under: the hosts file as loaded and the probe that read the
    hosts (a changed key or a new ddptui makes it another check)."""
    digest = hashlib.sha256(config_to_toml(config).encode())
    digest.update(b"\0" + PROBE_SOURCE.encode())
    return digest.hexdigest()[:32]


def document(report: CheckReport, checked_at: float) -> dict[str, Any]:
    return {
        "version": _VERSION,
        "key": key(report.config),
        "checked_at": checked_at,
        "elapsed_s": report.elapsed_s,
        "master_port_test": {
            "ran": report.master_port_test.ran,
            "why": report.master_port_test.why,
        },
        "hosts": [
            {
                "name": check.host.name,
                "probe_output": check.probe_output,
                "clock_offset_s": check.clock_offset_s,
                "master_port_reachable": check.master_port_reachable,
                "workdir_shared_with": list(check.workdir_shared_with),
            }
            for check in report.checks
        ],
    }


def from_document(
    doc: object, config: Config, *, now: float, reuse_s: float = REUSE_S
) -> RecentCheck | None:
    """The kept check ``doc`` as a report of ``config``'s hosts, evaluated again; None unless it
    is this hosts file's, younger than ``reuse_s``, of every host in order, and healthy."""
    if not isinstance(doc, dict) or doc.get("version") != _VERSION or doc.get("key") != key(config):
        return None
    checked_at, hosts, port = doc.get("checked_at"), doc.get("hosts"), doc.get("master_port_test")
    if not isinstance(checked_at, float) or not 0 <= now - checked_at <= reuse_s:
        return None
    ordered = config.checked_hosts
    if not isinstance(hosts, list) or len(hosts) != len(ordered) or not isinstance(port, dict):
        return None
    checks = []
    for host, kept in zip(ordered, hosts, strict=True):
        check = _host_check(host.name, kept)
        if check is None:
            return None
        facts, offset, reachable, shared = check
        checks.append(
            HostCheck(
                host,
                Reachability(Reach.OK),
                facts,
                clock_offset_s=offset,
                master_port_reachable=reachable,
                workdir_shared_with=shared,
            )
        )
    ran, why = port.get("ran"), port.get("why")
    if not isinstance(ran, bool) or not isinstance(why, str):
        return None
    began = time.time()
    findings = tuple(evaluate(config, checks))
    report = CheckReport(
        config,
        tuple(checks),
        findings,
        time.time() - began,
        PortTest(ran, why),
        began_at=began,
    )
    return RecentCheck(report, checked_at) if report.healthy else None


def _host_check(
    name: str, kept: object
) -> tuple[HostFacts, float | None, bool | None, tuple[str, ...]] | None:
    if not isinstance(kept, dict) or kept.get("name") != name:
        return None
    output, offset = kept.get("probe_output"), kept.get("clock_offset_s")
    reachable, shared = kept.get("master_port_reachable"), kept.get("workdir_shared_with")
    if not isinstance(output, str) or not (offset is None or isinstance(offset, float)):
        return None
    if not (reachable is None or isinstance(reachable, bool)) or not isinstance(shared, list):
        return None
    if not all(isinstance(other, str) for other in shared):
        return None
    try:
        facts = parse_facts(output)
    except ProbeError:
        return None
    return facts, offset, reachable, tuple(shared)


class CheckCache:
    """The kept checks under ``root``, one file per hosts file."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, config: Config) -> Path:
        return self.root / f"{key(config)}.json"

    def keep(self, report: CheckReport) -> None:
        """Keep ``report`` if it is healthy with every host probed; otherwise forget the kept
        one, so that the next launch checks again. A head whose state directory cannot be
        written keeps nothing: the next launch checks again."""
        path = self.path(report.config)
        try:
            if not report.healthy or any(not check.probe_output for check in report.checks):
                self.forget(report.config)
                return
            make_dirs(self.root)
            write_atomic(path, json.dumps(document(report, report.began_at + report.elapsed_s)))
        except OSError:
            return

    def forget(self, config: Config) -> None:
        """No kept check of ``config`` stands any more (a launch on it failed)."""
        with contextlib.suppress(OSError):
            self.path(config).unlink(missing_ok=True)

    def recent(self, config: Config, now: float | None = None) -> RecentCheck | None:
        """The kept check of ``config`` if it may stand for a new one (:func:`from_document`)."""
        try:
            text = self.path(config).read_text(encoding="utf-8")
            doc = json.loads(text)
        except (OSError, ValueError):
            return None
        return from_document(doc, config, now=time.time() if now is None else now)
