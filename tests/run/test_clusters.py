"""One ``check``, ``plan`` and ``launch`` for every kind of cluster: RunControl asks the hosts
file's cluster, of the kind chosen once by its ``[slurm]`` table
(:func:`ddptui.run.backends.kind_of`), which gives the backend and the transport of the same
kind, and the front ends hold one type of check (:class:`ddptui.health.ClusterCheck`) whatever
it was."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import pytest

from ddptui.check import CheckReport, PortTest
from ddptui.config import Config, parse_config
from ddptui.config.model import SlurmConfig
from ddptui.errors import UsageError
from ddptui.health import ClusterCheck
from ddptui.health.slurm import SlurmCheck, evaluate_slurm, parse_sinfo
from ddptui.plan.launch import LaunchPlan, PlanError
from ddptui.plan.slurm import BatchPlan
from ddptui.remote.connection import RemoteCluster
from ddptui.remote.srun import SrunCluster
from ddptui.run.backends import Owner, kind_of
from ddptui.run.backends.slurm import commands as slurm_commands
from ddptui.run.backends.slurm.backend import SlurmBackend
from ddptui.run.backends.slurm.cluster import SlurmCluster
from ddptui.run.backends.ssh import cluster as ssh_cluster
from ddptui.run.backends.ssh.backend import SshBackend
from ddptui.run.backends.ssh.cluster import HostsCluster
from ddptui.run.control import RunControl
from ddptui.run.record import RunState
from ddptui.run.store import RunStore

HOSTS = '[[hosts]]\nname = "gpu-a"\naddress = "192.0.2.2"\n'


def _slurm(tmp_path: Path, workdir: str = "/shared/ddptui") -> Config:
    return parse_config(
        f'[cluster]\nworkdir = "{workdir}"\n[slurm]\nnodes = 2\n[job]\nnproc_per_node = 3\n',
        tmp_path / "slurm.toml",
    )


def _slurm_check(nodes: int = 2) -> SlurmCheck:
    up = parse_sinfo("node0|debug*|idle|(null)|none\nnode1|debug*|idle|(null)|none")
    return evaluate_slurm(SlurmConfig(nodes=nodes), up, set())


def _hosts_report(config: Config) -> CheckReport:
    return CheckReport(config, (), (), 0.1, PortTest(False, "one host"))


def test_both_kinds_of_check_are_one_type_with_what_front_ends_ask() -> None:
    config = parse_config(HOSTS, Path("hosts.toml"))
    for check in (_hosts_report(config), _slurm_check()):
        assert isinstance(check, ClusterCheck)
        assert check.healthy and check.findings == ()
        assert check.to_json()["findings"] == []
    assert not _slurm_check(nodes=3).healthy


def test_the_cluster_is_chosen_by_the_hosts_file_alone(tmp_path: Path) -> None:
    control = RunControl(RunStore(tmp_path / "runs"))
    hosts, slurm = parse_config(HOSTS, Path("hosts.toml")), _slurm(tmp_path)
    assert isinstance(kind_of(hosts).cluster(), HostsCluster)
    assert isinstance(kind_of(slurm).cluster(), SlurmCluster)
    # SSH hosts are planned from what their check found; a batch job needs no check to plan.
    assert control.plan_needs_check(hosts) and not control.plan_needs_check(slurm)


def test_the_kind_gives_its_cluster_s_backend_and_transport(tmp_path: Path) -> None:
    owner = cast(Owner, object())
    hosts, slurm = parse_config(HOSTS, Path("hosts.toml")), _slurm(tmp_path)

    async def transports() -> list[object]:
        ssh = await kind_of(hosts).transport(hosts.hosts, None)
        # No job yet: the login node, not a step (Slurm is not asked).
        srun = await kind_of(slurm).transport([], None)
        for each in (ssh, srun):
            await each.close()
        return [ssh, srun]

    assert isinstance(kind_of(hosts).backend(owner), SshBackend)
    assert isinstance(kind_of(slurm).backend(owner), SlurmBackend)
    ssh, srun = asyncio.run(transports())
    assert isinstance(ssh, RemoteCluster)
    assert isinstance(srun, SrunCluster) and srun.job_id is None


def test_front_ends_ask_what_a_cluster_can_do_and_hear_what_works_when_it_cannot(
    tmp_path: Path,
) -> None:
    control = RunControl(RunStore(tmp_path / "runs"))
    hosts, slurm = parse_config(HOSTS, Path("hosts.toml")), _slurm(tmp_path)
    assert control.has_fixed_hosts(hosts) and not control.has_fixed_hosts(slurm)
    control.require_measurable(hosts, "--bandwidth")
    with pytest.raises(UsageError) as refused:
        control.require_measurable(slurm, "--bandwidth", "my slurm.toml")
    assert str(refused.value) == (
        "my slurm.toml: a [slurm] cluster, whose nodes Slurm gives each job: ddptui checks "
        "them, and launches, follows, stops and resumes its runs (`ddptui check|launch 'my "
        "slurm.toml'`, or the console: `ddptui 'my slurm.toml'`); --bandwidth needs [[hosts]]"
    )
    with pytest.raises(UsageError, match="measuring the interconnect needs"):
        asyncio.run(control.measure(slurm, _slurm_check()))
    with pytest.raises(UsageError, match="trusting host keys needs"):
        asyncio.run(control.scan_host_keys(slurm))


def test_one_check_asks_slurm_for_a_slurm_cluster_and_the_hosts_for_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    slurm_check = _slurm_check()

    def sinfo(config: Config) -> SlurmCheck:
        asked.append("slurm")
        return slurm_check

    async def over_ssh(config: Config, progress: object = None) -> CheckReport:
        asked.append("ssh")
        return _hosts_report(config)

    monkeypatch.setattr(slurm_commands, "check", sinfo)
    monkeypatch.setattr(ssh_cluster, "check_cluster", over_ssh)
    control = RunControl(RunStore(tmp_path / "runs"))
    assert asyncio.run(control.check(_slurm(tmp_path))) is slurm_check
    hosts = parse_config(HOSTS, Path("hosts.toml"))
    assert isinstance(asyncio.run(control.check(hosts)), CheckReport)
    assert asked == ["slurm", "ssh"]


def test_one_plan_writes_a_batch_job_for_slurm_with_no_check(tmp_path: Path) -> None:
    control = RunControl(RunStore(tmp_path / "runs"))
    plan = control.plan(_slurm(tmp_path), extra_args=["--lr", "0.1"], debug=True)
    assert isinstance(plan, BatchPlan)
    assert (plan.nodes, plan.nproc, plan.debug, plan.extra_args) == (2, 3, True, ("--lr", "0.1"))
    assert plan.run_root.startswith("/shared/ddptui/runs/") and " --lr 0.1 " in plan.script


def test_a_slurm_workdir_the_nodes_cannot_share_is_a_usage_error(tmp_path: Path) -> None:
    control = RunControl(RunStore(tmp_path / "runs"))
    with pytest.raises(UsageError, match="a Slurm run's workdir is shared"):
        control.plan(_slurm(tmp_path, workdir="runs"))


def test_ssh_hosts_are_planned_from_their_check_and_only_from_it(tmp_path: Path) -> None:
    control = RunControl(RunStore(tmp_path / "runs"))
    hosts = parse_config(HOSTS, Path("hosts.toml"))
    with pytest.raises(PlanError, match="check them first"):
        control.plan(hosts)
    with pytest.raises(PlanError, match="check them first"):
        control.plan(hosts, _slurm_check())


def test_a_new_run_is_recorded_as_its_cluster_launches_it(tmp_path: Path) -> None:
    config = _slurm(tmp_path)
    plan = RunControl(RunStore(tmp_path / "runs")).plan(config, extra_args=["-x"], debug=True)
    new = kind_of(config).cluster().new_run(_slurm_check(), plan, demo=False)
    assert new.queues and new.options == ("--debug",)
    assert new.record.id == plan.run_id and new.record.state is RunState.STAGING
    assert new.record.args[-1:] == ["-x"] and new.record.world_size == 6
    # A plan of the other kind is refused, not half-recorded.
    hosts = parse_config(HOSTS, Path("hosts.toml"))
    with pytest.raises(PlanError):
        kind_of(hosts).cluster().new_run(_hosts_report(hosts), plan, demo=False)
    assert not isinstance(plan, LaunchPlan)
