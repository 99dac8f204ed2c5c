"""The launch plan: pure, from a config and the check's facts to each host's exact command."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.health import HostCheck
from ddptui.plan.launch import (
    AUTO_PORT_PLACEHOLDER,
    DEBUG_ENV,
    PlanError,
    plan_launch,
    with_master_port,
)
from ddptui.remote.status import Reach, Reachability
from ddptui.run.backends.ssh.launcher import attempt_argv
from tests.helpers import gpu, healthy_facts

RUN = "20261130-120000-abcd"


def _config(*hosts: HostConfig, **job: object) -> Config:
    return Config(
        Path("/etc/hosts.toml"),
        ClusterConfig(),
        hosts,
        JobConfig(**job),  # type: ignore[arg-type]
    )


def _checks(config: Config, **facts_changes: object) -> list[HostCheck]:
    checks = []
    for host in config.hosts:
        facts = healthy_facts(host.name)
        facts = replace(facts, disk=replace(facts.disk, path=f"/home/{host.name}/runs"))
        checks.append(HostCheck(host, Reachability(Reach.OK), facts))
    return checks


A = HostConfig(name="gpu-a", address="10.0.0.1")
B = HostConfig(name="gpu-b", address="10.0.0.2", rank0=True, env={"NCCL_IB_DISABLE": "1"})


def test_node_0_comes_first_and_every_host_gets_static_rendezvous() -> None:
    config = _config(A, B)
    plan = plan_launch(config, _checks(config), run_id=RUN)
    assert [node.host.name for node in plan.nodes] == ["gpu-b", "gpu-a"]
    assert plan.backend == "nccl"
    assert plan.world_size == 4
    head, worker = plan.nodes
    assert head.run_dir == f"/home/gpu-b/runs/runs/{RUN}/node0"
    argv = list(worker.argv)
    assert argv[:3] == ["python3", "-m", "torch.distributed.run"]
    for flag in (
        "--nnodes=2",
        "--node-rank=1",
        "--nproc-per-node=2",
        "--master-addr=10.0.0.2",
        "--master-port=29500",
        "--max-restarts=0",
        f"--log-dir=/home/gpu-a/runs/runs/{RUN}/node1/logs/attempt-1",
        "--redirects=3",
    ):
        assert flag in argv
    assert argv[argv.index("-m", 3) + 1] == "trainer"
    assert f"--run-dir=/home/gpu-a/runs/runs/{RUN}/node1" in argv
    assert head.env["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_DISABLE" not in worker.env


def test_the_check_chooses_interface_and_visible_free_gpus() -> None:
    config = _config(A, B)
    checks = _checks(config)
    busy = replace(checks[0].facts.gpus, devices=(gpu(0, used=30000), gpu(1), gpu(2)))  # type: ignore[union-attr]
    checks[0] = replace(checks[0], facts=replace(checks[0].facts, gpus=busy))  # type: ignore[arg-type]
    config = _config(A, B, nproc_per_node=2)
    plan = plan_launch(config, checks, run_id=RUN)
    node = plan.node("gpu-a")
    assert node.cuda_visible_devices == "1,2"
    assert node.env["CUDA_VISIBLE_DEVICES"] == "1,2"
    assert node.env["NCCL_SOCKET_IFNAME"] == node.env["GLOO_SOCKET_IFNAME"] == "eth0"


def test_one_host_runs_on_loopback_without_an_interface() -> None:
    config = _config(A)
    plan = plan_launch(config, _checks(config), run_id=RUN)
    (node,) = plan.nodes
    assert "--master-addr=127.0.0.1" in node.argv and "--nnodes=1" in node.argv
    assert "GLOO_SOCKET_IFNAME" not in node.env and "NCCL_SOCKET_IFNAME" not in node.env


def test_a_spare_gets_no_node_and_counts_in_no_world_size() -> None:
    spare = HostConfig(name="gpu-c", address="10.0.0.3", spare=True)
    config = _config(spare, A, B)
    plan = plan_launch(config, _checks(config), run_id=RUN)
    assert [(node.node_rank, node.host.name) for node in plan.nodes] == [(0, "gpu-b"), (1, "gpu-a")]
    assert plan.world_size == 4 and plan.backend == "nccl"
    assert all("--nnodes=2" in node.argv for node in plan.nodes)
    assert "--master-addr=10.0.0.2" in plan.node("gpu-a").argv


def test_a_spare_the_check_could_not_probe_does_not_stop_a_plan() -> None:
    spare = HostConfig(name="gpu-c", address="10.0.0.3", spare=True)
    config = _config(A, B, spare)
    checks = _checks(config)
    plan = plan_launch(config, [*checks[:2], replace(checks[2], facts=None)], run_id=RUN)
    assert [node.host.name for node in plan.nodes] == ["gpu-b", "gpu-a"]


def test_auto_port_is_a_placeholder_until_node_0_names_one() -> None:
    config = replace(_config(A, B), cluster=ClusterConfig(master_port="auto"))
    plan = plan_launch(config, _checks(config), run_id=RUN)
    assert all(f"--master-port={AUTO_PORT_PLACEHOLDER}" in node.argv for node in plan.nodes)
    chosen = with_master_port(plan, 41234)
    assert chosen.master_port == 41234
    assert all("--master-port=41234" in node.argv for node in chosen.nodes)


def test_user_script_module_args_and_debug() -> None:
    script = _config(A, script=Path("/home/me/jobs/train.py"), args=("--lr", "1"))
    plan = plan_launch(script, _checks(script), run_id=RUN, extra_args=["--x"], debug=True)
    argv = list(plan.nodes[0].argv)
    assert argv[-3:] == ["--lr", "1", "--x"] and "train.py" in argv and "trainer" not in argv
    assert DEBUG_ENV.items() <= plan.nodes[0].env.items()
    module = _config(A, module="mypkg.train")
    argv = list(plan_launch(module, _checks(module), run_id=RUN).nodes[0].argv)
    assert argv[argv.index("-m", 3) : argv.index("-m", 3) + 2] == ["-m", "mypkg.train"]


def test_uninstrumented_ranks_are_told_so_and_rich_may_write_into_their_pipe() -> None:
    script = _config(A, B, script=Path("/home/me/jobs/train.py"))
    plan = plan_launch(script, _checks(script), run_id=RUN)
    assert all("DDPTUI_INSTRUMENT" not in node.env for node in plan.nodes)
    left_alone = _config(A, B, script=Path("/home/me/jobs/train.py"), instrument=False)
    for node in plan_launch(left_alone, _checks(left_alone), run_id=RUN).nodes:
        assert node.env["DDPTUI_INSTRUMENT"] == "0" and node.env["TTY_COMPATIBLE"] == "1"
        assert node.env.get("NCCL_IB_DISABLE") == ("1" if node.host.name == "gpu-b" else None)


def test_a_host_without_facts_or_processes_cannot_be_planned() -> None:
    config = _config(A, B)
    checks = _checks(config)
    with pytest.raises(PlanError, match="no facts for gpu-a"):
        plan_launch(config, [checks[1], replace(checks[0], facts=None)], run_id=RUN)
    cpu = _config(A, B, nproc_per_node="gpus")
    checks = _checks(cpu)
    no_gpus = replace(checks[0].facts.gpus, devices=(), source="none")  # type: ignore[union-attr]
    torch = replace(checks[0].facts.torch, cuda_available=False)  # type: ignore[union-attr]
    checks[0] = replace(checks[0], facts=replace(checks[0].facts, gpus=no_gpus, torch=torch))  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="gpu-a would start no process"):
        plan_launch(cpu, checks, run_id=RUN)
    with pytest.raises(PlanError, match="not a run id"):
        plan_launch(config, _checks(config), run_id="x; rm -rf /")


def test_only_torchrun_s_own_flag_is_replaced_not_the_script_s() -> None:
    config = _config(A, script=Path("/x/train.py"), args=("--master-port=1", "--log-dir=/mine"))
    plan = with_master_port(plan_launch(config, _checks(config), run_id=RUN), 41000)
    argv = list(plan.nodes[0].argv)
    assert "--master-port=41000" in argv and argv[-2:] == ["--master-port=1", "--log-dir=/mine"]
    resumed = attempt_argv(argv, "/run", 2, 42000)
    assert "--master-port=42000" in resumed and "--log-dir=/run/logs/attempt-2" in resumed
    assert resumed[-2:] == ["--master-port=1", "--log-dir=/mine"]
