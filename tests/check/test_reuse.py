"""A recent healthy check kept for the next launch of the same hosts file, and when it may not
stand (:mod:`ddptui.check.reuse`, :meth:`RunControl.recent_check`)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from ddptui.check import CheckReport, PortTest
from ddptui.check.reuse import REUSE_S, CheckCache, from_document
from ddptui.config import Config, parse_config
from ddptui.health import HostCheck, Severity, evaluate
from ddptui.present.check import reused_check
from ddptui.probe.parse import parse_facts
from ddptui.remote.status import Reach, Reachability
from ddptui.run.control import RunControl
from ddptui.run.record import Attempt, RunRecord, RunState
from ddptui.run.store import RunStore
from tests.helpers.probe import probe_output, recorded_torch
from tests.run.bed import two_host_record


@pytest.fixture(scope="module")
def output(tmp_path_factory: pytest.TempPathFactory) -> str:
    """What the real probe prints on this machine (torch and nvidia-smi stood in for)."""
    return probe_output(
        tmp_path_factory.mktemp("probe"),
        python_path={"torch/__init__.py": recorded_torch()},
        smi_fixture="h200_idle",
    )


def _config(tmp_path: Path, *, hosts: int = 2, master_port: int = 29500) -> Config:
    text = f'[cluster]\nworkdir = "{tmp_path}/work"\nmaster_port = {master_port}\n'
    for number in range(hosts):
        text += f'[[hosts]]\nname = "gpu-{number}"\naddress = "127.0.0.{number + 1}"\n'
    return parse_config(text, tmp_path / "hosts.toml")


def _report(config: Config, output: str, *, began_at: float | None = None) -> CheckReport:
    facts = parse_facts(output)
    checks = [
        HostCheck(
            host,
            Reachability(Reach.OK),
            facts,
            clock_offset_s=0.25 * rank,
            master_port_reachable=True if rank else None,
            workdir_shared_with=("gpu-1",) if rank == 0 else ("gpu-0",),
            probe_output=output,
        )
        for rank, host in enumerate(config.ordered_hosts)
    ]
    findings = tuple(evaluate(config, checks))
    began = time.time() - 1.0 if began_at is None else began_at
    return CheckReport(config, tuple(checks), findings, 0.8, PortTest(True), began)


def _kept(tmp_path: Path, output: str) -> tuple[Config, CheckCache]:
    """Two hosts' healthy check, kept."""
    config = _config(tmp_path)
    cache = CheckCache(tmp_path / "checks")
    cache.keep(_report(config, output))
    return config, cache


def test_a_kept_healthy_check_reads_back_as_the_same_report(tmp_path: Path, output: str) -> None:
    config = _config(tmp_path)
    report = _report(config, output)
    assert report.healthy, report.findings
    cache = CheckCache(tmp_path / "checks")
    cache.keep(report)
    recent = cache.recent(config)
    assert recent is not None
    assert recent.checked_at == pytest.approx(report.began_at + report.elapsed_s)
    again = recent.report
    assert [check.host for check in again.checks] == [check.host for check in report.checks]
    assert [check.facts for check in again.checks] == [check.facts for check in report.checks]
    assert [c.clock_offset_s for c in again.checks] == [0.0, 0.25]
    assert [c.master_port_reachable for c in again.checks] == [None, True]
    assert [c.workdir_shared_with for c in again.checks] == [("gpu-1",), ("gpu-0",)]
    assert again.findings == report.findings and again.master_port_test == PortTest(True)
    # The launch's timeline starts where the reuse was decided, not at the old check.
    assert again.began_at > report.began_at + report.elapsed_s
    assert again.elapsed_s < 0.5
    said = reused_check(recent, now=recent.checked_at + 130)
    assert said.startswith("the check of 2 min ago stands (2 hosts healthy; same hosts file;")
    assert said.endswith("--recheck checks again")


def test_a_check_stands_only_for_the_same_hosts_file_for_five_minutes(
    tmp_path: Path, output: str
) -> None:
    config, cache = _kept(tmp_path, output)
    checked = json.loads(cache.path(config).read_text())["checked_at"]
    assert cache.recent(config, now=checked + REUSE_S - 1) is not None
    assert cache.recent(config, now=checked + REUSE_S + 1) is None
    # A clock that went back is no reason to trust it either.
    assert cache.recent(config, now=checked - 10) is None
    # Any change to the hosts file is another cluster as far as the check knows.
    assert cache.recent(_config(tmp_path, master_port=29600)) is None
    assert cache.recent(_config(tmp_path, hosts=3)) is None


def test_an_unhealthy_check_is_not_kept_and_forgets_the_healthy_one(
    tmp_path: Path, output: str
) -> None:
    config, cache = _kept(tmp_path, output)
    healthy = _report(config, output)
    unreachable = dataclasses.replace(
        healthy.checks[1], reach=Reachability(Reach.REFUSED), facts=None, probe_output=""
    )
    broken = dataclasses.replace(healthy, checks=(healthy.checks[0], unreachable))
    findings = tuple(evaluate(config, broken.checks))
    broken = dataclasses.replace(broken, findings=findings)
    assert any(finding.severity is Severity.ERROR for finding in findings)
    cache.keep(broken)
    assert not cache.path(config).exists() and cache.recent(config) is None
    # A failed launch forgets it too: the next one checks again.
    cache.keep(healthy)
    cache.forget(config)
    assert cache.recent(config) is None


@pytest.mark.parametrize(
    "change",
    [
        lambda doc: doc.update(version=2),
        lambda doc: doc.update(key="0" * 32),
        lambda doc: doc.update(checked_at="yesterday"),
        lambda doc: doc["hosts"].pop(),
        lambda doc: doc["hosts"].reverse(),
        lambda doc: doc["hosts"][1].update(probe_output="garbage"),
        lambda doc: doc["hosts"][1].update(clock_offset_s="soon"),
        lambda doc: doc["hosts"][1].update(workdir_shared_with=[1]),
        lambda doc: doc["hosts"][1].update(master_port_reachable="yes"),
        lambda doc: doc.update(master_port_test=None),
        lambda doc: doc.clear(),
    ],
)
def test_a_kept_check_that_was_tampered_with_does_not_stand(
    tmp_path: Path, output: str, change: object
) -> None:
    config, cache = _kept(tmp_path, output)
    doc = json.loads(cache.path(config).read_text())
    now = doc["checked_at"] + 1
    assert from_document(doc, config, now=now) is not None
    assert callable(change)
    change(doc)
    assert from_document(doc, config, now=now) is None
    cache.path(config).write_text("{not json")
    assert cache.recent(config) is None


def test_a_run_started_since_that_still_runs_means_checking_again(
    tmp_path: Path, output: str
) -> None:
    config = _config(tmp_path)
    store = RunStore(tmp_path / "state" / "runs")
    control = RunControl(store)
    report = _report(config, output)
    control.checks.keep(report)
    assert control.recent_check(config) is not None
    checked = report.began_at + report.elapsed_s
    # A run that was running when the check looked: what it holds, the check saw.
    store.create(_running("20261203-100000-aaaa", started=checked - 60), "")
    assert control.recent_check(config) is not None
    since = _running("20261203-100100-bbbb", started=checked + 5)
    store.create(since, "")
    assert control.recent_check(config) is None
    store.update(since.id, lambda record: record.transition(RunState.STOPPING, ""))
    assert control.recent_check(config) is None
    store.update(since.id, lambda record: record.transition(RunState.STOPPED, ""))
    assert control.recent_check(config) is not None


def _running(run_id: str, *, started: float) -> RunRecord:
    record = two_host_record()
    record.id = run_id
    record.attempts = [Attempt(1, started, 29500)]
    for state in (RunState.STAGING, RunState.STARTING, RunState.RUNNING):
        record.transition(state, state.value)
    return record
