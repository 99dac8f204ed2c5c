"""Fixtures for the two SSH test tiers, and the report of which one ran.

- ``testbed`` (session): a real 4-host cluster of network namespaces running OpenSSH sshd.
- ``slurm_bed`` (session): a real Slurm (slurmctld, a slurmd per host) on 3 hosts of their own,
  no sshd; its tests are marked ``slurm`` and leave it idle.
  Needs root; elsewhere its tests are skipped and the summary says why. Every test that uses
  it starts and ends with every fault undone (``_healthy_testbed``). Tests that build their
  own ``TestBed`` request ``testbed_capable`` to be skipped the same way.
- ``local_ssh_server`` (function): an in-process asyncssh server on 127.0.0.1; runs anywhere.
- ``cli`` (function): ``python -m ddptui`` with a run store of its own, for the test-bed tests of
  the runs layer, the hostile hosts and the console.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.run.bed import Cli, kill_supervisors
from tests.testbed import LocalSshServer, TestBed, TestBedBusy
from tests.testbed.cluster import why_unavailable
from tests.testbed.slurm import SlurmBed
from tests.testbed.slurm import why_unavailable as slurm_unavailable

TESTBED_HOSTS = 4
SLURM_HOSTS = 3
SKIP_REASON = "test bed unavailable: "
_PREFIXES = ["ddpt", *(f"ddpt{i}" for i in range(1, 10))]
_SLURM_PREFIXES = ["ddps", *(f"ddps{i}" for i in range(1, 10))]


@dataclass
class _BedReport:
    prefix: str = ""
    subnet: str = ""
    up_s: float = 0.0
    down_s: float = 0.0
    residue: tuple[str, ...] = ()
    unavailable: str | None = None


_REPORT = pytest.StashKey[_BedReport]()
TIERS = ("cluster", "slow", "slurm")
TIERS_RUN = "ddptui tiers run:"
"""The summary line ``.ci/run`` reads: how many tests of each tier ran (not skipped), so that
a run that reached fewer real hosts, torchruns or Slurm jobs than expected fails there."""
_TIER_COUNTS = pytest.StashKey[Counter[str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_REPORT] = _BedReport()
    counts = config.stash[_TIER_COUNTS] = Counter()
    if not hasattr(config, "workerinput"):
        # Counted where every report arrives once: the controller under xdist, or the session.
        config.pluginmanager.register(_TierCounter(counts), "ddptui-tier-counter")
    _without_the_venv_on_path()


class _TierCounter:
    def __init__(self, counts: Counter[str]) -> None:
        self.counts = counts

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and not report.skipped:
            self.counts["all"] += 1
            tiers = dict(report.user_properties).get("ddptui_tiers", ())
            self.counts.update(tier for tier in TIERS if tier in tiers)


def _without_the_venv_on_path() -> None:
    """The suite sees one PATH whether its venv is activated or not: the venv's ``bin`` holds
    tools a host may or may not have (py-spy, torchrun), and the hosts' processes the tests
    start inherit PATH. Tests that want such a tool on a host put it there themselves."""
    if sys.prefix == sys.base_prefix:
        return
    venv_bin = str(Path(sys.prefix) / "bin")
    kept = [entry for entry in os.environ.get("PATH", "").split(os.pathsep) if entry != venv_bin]
    os.environ["PATH"] = os.pathsep.join(kept)
    os.environ.pop("VIRTUAL_ENV", None)


def pytest_sessionfinish(session: pytest.Session) -> None:
    # An xdist worker's bed report goes back to the controller, which prints the summary.
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:
        worker_output["ddptui_bed"] = asdict(session.config.stash[_REPORT])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    sent = getattr(node, "workeroutput", {}).get("ddptui_bed")
    if sent and (sent["prefix"] or sent["unavailable"]):
        sent["residue"] = tuple(sent["residue"])
        node.config.stash[_REPORT] = _BedReport(**sent)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Before xdist's own hook, which reads the groups off the items. Whatever reaches the test
    # bed, directly or through another fixture, is a cluster test, so `-m "not cluster"`
    # deselects it without every author remembering the mark.
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "testbed_capable" in fixtures:
            item.add_marker(pytest.mark.cluster)
        if "slurm_bed" in fixtures:
            item.add_marker(pytest.mark.slurm)
        # By marker, not keyword: a test's keywords hold its directories' names too (a test in
        # tests/run/backends/slurm/ has "slurm" among them without needing the Slurm bed).
        tiers = tuple(tier for tier in TIERS if item.get_closest_marker(tier) is not None)
        item.user_properties.append(("ddptui_tiers", tiers))
        group = _worker_group(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))


def _worker_group(item: pytest.Item) -> str | None:
    """Which tests share one xdist worker (``--dist loadgroup``): each bed's, so that it comes
    up once for them and they never race each other for it, and the other slow ones (torchrun
    on this machine's loopback, the demo's throwaway users), written to run one at a time.
    The test bed's tier is too long for one worker: the supervisor's tests, recovery's and
    the frameworks' name groups of their own (``second-bed``, ``recovery-bed``,
    ``frameworks-bed``), each on its worker's bed (a bed comes up in about a second).
    The beds wait on their hosts far more than they compute, so the groups run side by side
    and the pure tests fill in."""
    for marker in ("slurm", "cluster", "slow"):
        if item.get_closest_marker(marker) is not None:
            return marker
    return None


@pytest.fixture(scope="session")
def testbed_capable(request: pytest.FixtureRequest) -> None:
    """Skips the test (saying why) unless this machine can host test beds; for tests that
    build their own :class:`TestBed`."""
    report = request.config.stash[_REPORT]
    report.unavailable = why_unavailable()
    if report.unavailable is not None:
        _without_a_bed(report.unavailable)


@pytest.fixture(scope="session")
def testbed(
    testbed_capable: None, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestBed]:
    """Four hosts (node0…node3), up for the session; skipped where namespaces can't be made."""
    report = request.config.stash[_REPORT]
    bed = _start(tmp_path_factory.mktemp("testbed"))
    report.prefix, report.subnet, report.up_s = bed.prefix, str(bed.subnet), bed.up_seconds
    yield bed
    began = time.monotonic()
    bed.stop()
    report.down_s = time.monotonic() - began
    report.residue = tuple(bed.residue())
    if report.residue:
        pytest.fail(f"the test bed left behind: {', '.join(report.residue)}")


def _without_a_bed(reason: str) -> None:
    """Skip a test that needs a bed this machine cannot bring up, saying why; under CI
    (``CI=true``) fail it instead: a green run that never reached a real sshd, supervisor or
    Slurm would say nothing of them. A bed turned off on purpose (``DDPTUI_TESTBED=off``) is
    skipped everywhere."""
    if os.environ.get("CI") == "true" and os.environ.get("DDPTUI_TESTBED") != "off":
        pytest.fail(f"CI runs every test bed, and this machine cannot bring one up: {reason}")
    pytest.skip(SKIP_REASON + reason)


def _start(root: Path, hosts: int = TESTBED_HOSTS, prefixes: list[str] = _PREFIXES) -> TestBed:
    # A concurrent session (another checkout, another engineer) holds "ddpt": take the next.
    for prefix in prefixes:
        try:
            return TestBed.start(hosts, root, prefix=prefix)
        except TestBedBusy:
            continue
    raise TestBedBusy(f"every prefix of {prefixes} is in use")


@pytest.fixture(scope="session")
def slurm_bed(
    testbed_capable: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SlurmBed]:
    """Slurm on three hosts of their own (node0…node2), up for the session; their sshd is
    stopped, so nothing reaches them but Slurm. Skipped, saying why, without Slurm."""
    reason = slurm_unavailable()
    if reason is not None:
        _without_a_bed(reason)
    root = tmp_path_factory.mktemp("slurm")
    bed = _start(root / "hosts", SLURM_HOSTS, _SLURM_PREFIXES)
    try:
        slurm = SlurmBed.start(bed, root / "slurm")
    except BaseException:
        bed.stop()
        raise
    yield slurm
    slurm.stop()
    bed.stop()
    residue = bed.residue()
    if residue:
        pytest.fail(f"the Slurm bed left behind: {', '.join(residue)}")


@pytest.fixture(autouse=True)
def _idle_slurm_bed(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test that uses the Slurm bed leaves it idle: no job, every node up."""
    if "slurm_bed" not in request.fixturenames:
        yield
        return
    slurm: SlurmBed = request.getfixturevalue("slurm_bed")
    yield
    slurm.idle()


@pytest.fixture(autouse=True)
def _healthy_testbed(request: pytest.FixtureRequest) -> Iterator[None]:
    """Undo every fault after each test that uses the test bed.

    The bed starts healthy and every user restores it, so each test starts healthy too;
    a restore that fails is an error of the test that left the mess.
    """
    if "testbed" not in request.fixturenames:
        yield
        return
    bed: TestBed = request.getfixturevalue("testbed")
    yield
    bed.restore()


@pytest.fixture
def local_ssh_server(tmp_path: Path) -> Iterator[LocalSshServer]:
    """A real SSH server (sessions, no SFTP) on 127.0.0.1 trusting ``.client_key``."""
    server = LocalSshServer.start(tmp_path / "local-ssh")
    yield server
    server.stop()


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    counts = config.stash[_TIER_COUNTS]
    ran = ", ".join(f"{tier} {counts[tier]}" for tier in TIERS)
    terminalreporter.write_line(f"{TIERS_RUN} {ran} (of {counts['all']} tests run)")
    report = config.stash[_REPORT]
    skipped = [
        rep
        for rep in terminalreporter.stats.get("skipped", [])
        if SKIP_REASON in str(getattr(rep, "longrepr", ""))
    ]
    if skipped:
        terminalreporter.write_sep("-", "ddptui test bed", yellow=True)
        terminalreporter.write_line(
            f"{len(skipped)} cluster test(s) SKIPPED: {report.unavailable or 'see skip reasons'}."
        )
        terminalreporter.write_line(
            "They need a multi-host test bed (root, iproute2, openssh-server). Tests using the "
            "in-process SSH server on 127.0.0.1 (local_ssh_server) ran as usual."
        )
    elif report.prefix:
        terminalreporter.write_sep("-", "ddptui test bed")
        left = ", ".join(report.residue) if report.residue else "nothing left behind"
        terminalreporter.write_line(
            f"{TESTBED_HOSTS} hosts, prefix {report.prefix}, subnet {report.subnet}: "
            f"up {report.up_s:.2f} s, down {report.down_s:.2f} s; {left}"
        )


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    """``python -m ddptui`` with a run store of its own; no supervisor of it outlives the test
    (a test that fails halfway can leave a live run, whose supervisor would follow it on)."""
    command_line = Cli(tmp_path / "state")
    yield command_line
    kill_supervisors(command_line.store)
