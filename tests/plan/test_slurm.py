"""The batch script of a Slurm run: what sbatch reads, and what each node's part runs, word for
word, with hostile values left literal."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddptui import layout
from ddptui.config import parse_config
from ddptui.errors import UsageError
from ddptui.onhost import common, processes
from ddptui.plan.launch import (
    ATTEMPT_ENV,
    FLIGHT_RECORDER_NAMES,
    STACKS_ENV,
)
from ddptui.plan.slurm import PORT_BASE, PORT_SPAN, plan_batch, shell, shell_word
from ddptui.remote.programs import agent_program, source

RUN = "20261202-051500-abcd"
HOSTILE = ["--note", 'it\'s $(touch /tmp/pwned) `id` ${HOME} "q" ;|&', "--x=*"]


def _config(tmp_path: Path, extra: str = "", python: str = "/opt/venv/bin/python") -> object:
    text = f"""
[cluster]
python = "{python}"
workdir = "{tmp_path}/shared"

[slurm]
nodes = 3
partition = "cpu"
time = "30"
exclude = ["n[07-08]", "n11"]
sbatch_args = ["--mem=0"]

[job]
nproc_per_node = 2
args = {json.dumps(HOSTILE)}
{extra}
"""
    return parse_config(text, tmp_path / "slurm.toml")


def test_shell_words_quote_text_and_expand_only_their_references() -> None:
    assert shell_word("plain") == "plain"
    assert shell_word("") == "''"
    assert shell_word("it's $HOME") == "'it'\"'\"'s $HOME'"
    assert shell_word(f"--node-rank={shell('SLURM_NODEID')}") == '--node-rank="${SLURM_NODEID}"'
    assert shell_word(f"/a b/node{shell('N')}/x") == "'/a b/node'\"${N}\"/x"


def test_sbatch_reads_one_task_per_node_and_every_slurm_key(tmp_path: Path) -> None:
    plan = plan_batch(_config(tmp_path), run_id=RUN, workdir=f"{tmp_path}/shared")  # type: ignore[arg-type]
    assert (plan.nodes, plan.nproc, plan.world_size, plan.backend) == (3, 2, 6, "gloo")
    options = re.findall(r"^#SBATCH (\S+)$", plan.script, re.MULTILINE)
    assert options == [
        f"--job-name=ddptui-{RUN}",
        "--nodes=3",
        "--ntasks-per-node=1",
        "--partition=cpu",
        "--time=30",
        "--exclude=n[07-08],n11",
        f"--output={tmp_path}/shared/runs/{RUN}/slurm/job-%j.out",
        "--open-mode=append",
        "--signal=B:USR1@90",
        "--requeue",
        "--mem=0",
    ]
    # sbatch stops reading options at the first command: every one comes before it.
    first_command = next(
        i for i, line in enumerate(plan.script.splitlines()) if line and not line.startswith("#")
    )
    assert all(
        i < first_command
        for i, line in enumerate(plan.script.splitlines())
        if line.startswith("#SBATCH")
    )
    assert "--no-kill" not in plan.script
    assert "srun --nodes=3 --ntasks=3 --ntasks-per-node=1 --nodelist=" in plan.script
    assert plan.script_path == f"{tmp_path}/shared/runs/{RUN}/slurm/attempt-1.sh"
    subprocess.run(["bash", "-n"], input=plan.script, text=True, check=True)


def test_gpus_per_node_sets_the_processes_and_nccl(tmp_path: Path) -> None:
    config = parse_config(
        '[cluster]\nworkdir = "/w"\nsocket_ifname = "ib0"\n[slurm]\nnodes = 2\ngpus_per_node = 4\n',
        tmp_path / "s.toml",
    )
    plan = plan_batch(config, run_id=RUN, workdir="/w")
    assert (plan.nproc, plan.backend) == (4, "nccl")
    assert "#SBATCH --gpus-per-node=4\n" in plan.script
    # The interface the user named, for both libraries; none is looked for on the node.
    assert "export GLOO_SOCKET_IFNAME=ib0\nexport NCCL_SOCKET_IFNAME=ib0\n" in plan.script
    assert "ip -o addr" not in plan.script


def _node_part(script: str) -> str:
    return script.split("<<'NODE'\n", 1)[1].split("\nNODE\n", 1)[0]


@pytest.mark.parametrize(
    ("name", "node", "attempt", "resumed"), [("n7", "0", 1, False), ("n5", "2", 1, True)]
)
def test_each_node_runs_torchrun_with_its_rank_and_the_args_as_written(
    tmp_path: Path, name: str, node: str, attempt: int, resumed: bool
) -> None:
    # The host's Python, as the node finds it: it runs the node agent, and otherwise (torchrun)
    # is a stand-in that says what it was given.
    python = tmp_path / "python"
    python.write_text(
        f"#!{sys.executable}\nimport json, os, runpy, sys\n"
        "if sys.argv[1].endswith('agent.py'):\n"
        "    sys.argv = sys.argv[1:]\n"
        "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
        "print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(), "
        "'env': {k: os.environ.get(k) for k in ('OMP_NUM_THREADS', 'DDPTUI_RUN_DIR', "
        "'DDPTUI_ATTEMPT', 'GLOO_SOCKET_IFNAME')}}))\n"
    )
    python.chmod(0o755)
    config = _config(tmp_path, python=str(python))
    plan = plan_batch(config, run_id=RUN, workdir=f"{tmp_path}/shared", attempt=attempt)  # type: ignore[arg-type]
    run_root = Path(plan.run_root)
    (run_root / "code").mkdir(parents=True)
    # What submitting the job puts in the shared workdir.
    Path(layout.node_agent(plan.run_root)).write_text(agent_program())
    restarts = "1" if resumed else "0"
    env = {
        "PATH": os.environ["PATH"],
        # Slurm's own node id counts the step's nodes in the allocation's order, which an
        # attempt on a spare does not keep: the node's rank is its place in the attempt's list.
        "SLURM_NODEID": "1",
        "run_nodes": "n7 n3 n5 ",
        "SLURMD_NODENAME": name,
        "SLURM_NNODES": "3",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "15042",
        "attempt": str(attempt + int(restarts)),
    }
    done = subprocess.run(["bash", "-c", _node_part(plan.script)], env=env, check=False)
    node_dir = run_root / f"node{node}"
    assert done.returncode == 0
    assert (node_dir / "node" / f"attempt-{env['attempt']}.exit").read_text() == "0\n"
    seen = json.loads((node_dir / "node" / f"attempt-{env['attempt']}.out").read_text())
    assert seen["cwd"] == str(run_root / "code")
    # Node 0's address is on the loopback here: gloo is never told to use lo.
    assert seen["env"] == {
        "OMP_NUM_THREADS": "1",
        "DDPTUI_RUN_DIR": str(node_dir),
        "DDPTUI_ATTEMPT": env["attempt"],
        "GLOO_SOCKET_IFNAME": None,
    }
    # The ranks' stack handler is in place, first on their PYTHONPATH.
    site = processes.stacks_dir(node_dir) / "site" / "sitecustomize.py"
    assert site.read_text() == source("sitecustomize")
    assert seen["argv"] == [
        "-m",
        "torch.distributed.run",
        "--nnodes=3",
        f"--node-rank={node}",
        "--nproc-per-node=2",
        "--master-addr=127.0.0.1",
        "--master-port=15042",
        "--max-restarts=0",
        f"--log-dir={node_dir}/logs/attempt-{env['attempt']}",
        "--redirects=3",
        "-m",
        "trainer",
        f"--run-dir={node_dir}",
        "--checkpoint-every=200",
        *HOSTILE,
        *(["--resume", "latest"] if resumed else []),
    ]
    assert not Path("/tmp/pwned").exists()


def test_the_master_port_comes_from_the_job_id_below_the_ephemeral_ports(tmp_path: Path) -> None:
    plan = plan_batch(_config(tmp_path), run_id=RUN, workdir="/w")  # type: ignore[arg-type]
    (line,) = [line for line in plan.script.splitlines() if "MASTER_PORT=" in line]
    ports = {
        int(
            subprocess.run(
                ["bash", "-c", f"{line}; echo $MASTER_PORT"],
                env={"SLURM_JOB_ID": str(job)},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        for job in (1, 41, 14999, 15001, 987654)
    }
    # Jobs 1 and 15001 share a port: 15000 jobs apart, neither is likely still running.
    assert len(ports) == 4
    assert all(PORT_BASE <= port < PORT_BASE + PORT_SPAN < 32768 for port in ports)


def test_every_flight_recorder_name_torch_has_read_is_set_unless_the_nodes_env_sets_it(
    tmp_path: Path,
) -> None:
    config = parse_config(
        '[cluster]\nworkdir = "/w"\nenv = { TORCH_NCCL_TRACE_BUFFER_SIZE = "500" }\n'
        "[slurm]\nnodes = 2\ngpus_per_node = 4\n",
        tmp_path / "s.toml",
    )
    script = plan_batch(config, run_id=RUN, workdir="/w").script
    prefix = f'/w/runs/{RUN}/node"${{node_rank}}"/node/flight_'
    assert f"export TORCH_FR_DUMP_TEMP_FILE={prefix}\n" in script
    assert f"export TORCH_NCCL_DEBUG_INFO_TEMP_FILE={prefix}\n" in script
    assert "export TORCH_FR_DUMP_ON_TIMEOUT=1\nexport TORCH_NCCL_DUMP_ON_TIMEOUT=1\n" in script
    # The nodes' own buffer size stands, under whichever name it was given.
    assert "export TORCH_NCCL_TRACE_BUFFER_SIZE=500\n" in script
    assert "TORCH_FR_BUFFER_SIZE" not in script


def test_the_names_are_those_the_probe_looks_for_in_torch_s_libraries() -> None:
    source = (Path(__file__).parents[2] / "ddptui" / "onhost" / "probe_torch.py").read_text()
    found = re.search(r"^FLIGHT_RECORDER = (\{.*?^\})", source, re.MULTILINE | re.DOTALL)
    assert found is not None
    probed = ast.literal_eval(found.group(1))
    assert {role: tuple(names) for role, names in probed.items()} == FLIGHT_RECORDER_NAMES


def test_the_node_script_marks_its_processes_as_the_node_agent_looks_for_them() -> None:
    assert (layout.RUN_DIR_ENV, ATTEMPT_ENV, STACKS_ENV) == (
        common.RUN_MARK,
        common.ATTEMPT_MARK,
        common.STACKS_MARK,
    )
    assert layout.node_stacks("/w/runs/r/node1") == str(
        processes.stacks_dir(Path("/w/runs/r/node1"))
    )


@pytest.mark.parametrize("arg", ["x\nNODE\ntouch /tmp/pwned-by-args", "tab\there", "\x1b]0;t\x07"])
def test_an_argument_after_the_double_dash_with_a_control_character_is_refused(
    tmp_path: Path, arg: str
) -> None:
    # A newline ends the node script's here-document early: what follows ran in the script.
    with pytest.raises(UsageError, match="after -- holds a control character"):
        plan_batch(_config(tmp_path), run_id=RUN, workdir=f"{tmp_path}/shared", extra_args=[arg])  # type: ignore[arg-type]
    plain_args = ["--note", "a b 'c'"]
    plan = plan_batch(
        _config(tmp_path),  # type: ignore[arg-type]
        run_id=RUN,
        workdir=f"{tmp_path}/shared",
        extra_args=plain_args,
    )
    assert "NODE\n" in plan.script


def _fake_slurm(tmp_path: Path, allocation: str, exits: list[int]) -> tuple[dict[str, str], Path]:
    """Stand-ins for ``scontrol`` and ``srun`` on a PATH of their own: the allocation's nodes
    (``scontrol show hostnames``), each node's address, and each srun step's words (its
    options, the attempt and its nodes) kept a line each, exiting as ``exits`` says in turn."""
    bin_dir, steps = tmp_path / "bin", tmp_path / "steps.jsonl"
    bin_dir.mkdir()
    (tmp_path / "exits").write_text("".join(f"{code}\n" for code in exits))
    (bin_dir / "scontrol").write_text(
        "#!/bin/bash\n"
        'case "$1 $2" in\n'
        f"  'show hostnames') printf '%s\\n' {allocation} ;;\n"
        "  'show node') echo \"NodeName=$3 NodeAddr=10.0.0.${3#n}\" ;;\n"
        '  *) echo "$@" >> ' + str(tmp_path / "scontrol.log") + " ;;\n"
        "esac\n"
    )
    (bin_dir / "srun").write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"exits = open({str(tmp_path / 'exits')!r}).read().split()\n"
        f"done = sum(1 for _ in open({str(steps)!r})) if os.path.exists({str(steps)!r}) else 0\n"
        f"with open({str(steps)!r}, 'a') as out:\n"
        "    out.write(json.dumps({'options': [a for a in sys.argv[1:] if a.startswith('--')],"
        " 'attempt': os.environ['attempt'], 'nodes': os.environ['run_nodes'].split(),"
        " 'master': os.environ['MASTER_ADDR']}) + '\\n')\n"
        "sys.exit(int(exits[done]))\n"
    )
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NODELIST": "n[0-3]",
    }
    return env, steps


def _recovering(tmp_path: Path) -> object:
    return _config(tmp_path, '\n[recovery]\nmode = "resume"')


def _steps(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_run_with_spares_holds_them_idle_and_its_first_attempt_runs_on_the_first_nodes(
    tmp_path: Path,
) -> None:
    text = (
        f'[cluster]\nworkdir = "{tmp_path}/shared"\n[slurm]\nnodes = 2\nspare_nodes = 2\n'
        '[job]\nnproc_per_node = 1\n[recovery]\nmode = "resume"\n'
    )
    config = parse_config(text, tmp_path / "s.toml")
    plan = plan_batch(config, run_id=RUN, workdir=f"{tmp_path}/shared")
    assert "#SBATCH --nodes=4\n" in plan.script
    assert "#SBATCH --no-kill\n" in plan.script
    env, steps = _fake_slurm(tmp_path, "n0 n1 n2 n3", [0])
    Path(layout.slurm_nodes(plan.run_root, 1)).parent.mkdir(parents=True)
    done = subprocess.run(["bash", "-c", plan.script], env=env, check=False)
    assert done.returncode == 0
    (step,) = _steps(steps)
    assert step["nodes"] == ["n0", "n1"] and step["attempt"] == "1"
    assert "--nodelist=n0,n1" in step["options"]  # type: ignore[operator]
    assert step["master"] == "10.0.0.0"
    assert Path(layout.slurm_nodes(plan.run_root, 1)).read_text() == "n0 n1\n"


def test_a_failed_attempt_waits_for_its_supervisor_s_next_nodes_in_the_same_allocation(
    tmp_path: Path,
) -> None:
    plan = plan_batch(_recovering(tmp_path), run_id=RUN, workdir=f"{tmp_path}/shared")  # type: ignore[arg-type]
    env, steps = _fake_slurm(tmp_path, "n0 n1 n2 n3", [137, 0])
    Path(layout.slurm_nodes(plan.run_root, 1)).parent.mkdir(parents=True)
    job = subprocess.Popen(["bash", "-c", plan.script], env=env)
    try:
        deadline = time.monotonic() + 10
        while not steps.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)
        # The job waits, its failed step done, for the supervisor's word.
        assert job.poll() is None and len(_steps(steps)) == 1
        Path(layout.slurm_nodes(plan.run_root, 2)).write_text("n0 n3 n2\n")
        assert job.wait(timeout=10) == 0
    finally:
        job.kill()
    first, second = _steps(steps)
    assert (first["attempt"], first["nodes"]) == ("1", ["n0", "n1", "n2"])
    assert (second["attempt"], second["nodes"]) == ("2", ["n0", "n3", "n2"])
    assert "--nodelist=n0,n3,n2" in second["options"]  # type: ignore[operator]


def test_without_recovery_a_failed_attempt_ends_its_job_at_once(tmp_path: Path) -> None:
    plan = plan_batch(_config(tmp_path), run_id=RUN, workdir=f"{tmp_path}/shared")  # type: ignore[arg-type]
    env, steps = _fake_slurm(tmp_path, "n0 n1 n2", [3])
    Path(layout.slurm_nodes(plan.run_root, 1)).parent.mkdir(parents=True)
    done = subprocess.run(["bash", "-c", plan.script], env=env, check=False, timeout=10)
    assert done.returncode == 3
    assert len(_steps(steps)) == 1


def test_a_requeued_job_is_the_next_attempt_and_leaves_out_the_nodes_set_aside(
    tmp_path: Path,
) -> None:
    plan = plan_batch(_recovering(tmp_path), run_id=RUN, workdir=f"{tmp_path}/shared")  # type: ignore[arg-type]
    env, steps = _fake_slurm(tmp_path, "n0 n1 n2 n3", [0])
    # Attempt 1, then attempt 2 recovery ran in the same allocation, set n1 aside; Slurm then
    # requeued the job (its first start's attempt 1, restarted once).
    for attempt, nodes in ((1, "n0 n1 n2"), (2, "n0 n3 n2")):
        path = Path(layout.slurm_nodes(plan.run_root, attempt))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(nodes + "\n")
    Path(layout.slurm_set_aside(plan.run_root)).write_text("n1\n")
    done = subprocess.run(
        ["bash", "-c", plan.script], env={**env, "SLURM_RESTART_COUNT": "1"}, check=False
    )
    assert done.returncode == 0
    (step,) = _steps(steps)
    assert (step["attempt"], step["nodes"]) == ("3", ["n0", "n2", "n3"])


def test_a_resume_s_job_never_asks_for_the_nodes_recovery_set_aside(tmp_path: Path) -> None:
    plan = plan_batch(
        _recovering(tmp_path),  # type: ignore[arg-type]
        run_id=RUN,
        workdir=f"{tmp_path}/shared",
        set_aside=["n1"],
    )
    assert "#SBATCH --exclude=n[07-08],n11,n1\n" in plan.script
