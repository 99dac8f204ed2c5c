"""A ``[slurm]`` cluster in the hosts file: what it holds, and one line per mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.config import config_to_toml, parse_config
from ddptui.config.model import SlurmConfig
from ddptui.errors import ConfigError

SLURM = """
[cluster]
python = "/opt/venv/bin/python"
workdir = "/shared/ddptui"
env = { NCCL_IB_DISABLE = "1" }

[slurm]
nodes = 4
gpus_per_node = 8
partition = "gpu"
time = "1-12:00:00"
account = "vision"
qos = "high"
constraint = "h100&ib"
exclude = ["gpu[07-08]", "gpu11"]
sbatch_args = ["--mem=0", "--exclusive"]
"""


def _load(text: str) -> object:
    return parse_config(text, Path("/etc/slurm.toml"), shown="slurm.toml")


def test_a_slurm_cluster_has_no_hosts_and_every_node_takes_the_cluster_settings() -> None:
    config = parse_config(SLURM, Path("/etc/slurm.toml"))
    assert config.hosts == ()
    assert config.slurm == SlurmConfig(
        nodes=4,
        gpus_per_node=8,
        partition="gpu",
        time="1-12:00:00",
        account="vision",
        qos="high",
        constraint="h100&ib",
        exclude=("gpu[07-08]", "gpu11"),
        sbatch_args=("--mem=0", "--exclusive"),
    )
    assert config.node is not None
    assert config.node.python == "/opt/venv/bin/python"
    assert config.node.workdir == "/shared/ddptui"
    assert dict(config.node.env) == {"NCCL_IB_DISABLE": "1"}
    # One string is one node list.
    single = parse_config(
        '[slurm]\nnodes = 2\nexclude = "gpu[01-03]"\n[job]\nnproc_per_node = 2\n', Path("s.toml")
    )
    assert single.slurm is not None and single.slurm.exclude == ("gpu[01-03]",)


def test_the_resolved_file_loads_back_as_the_same_cluster() -> None:
    config = parse_config(SLURM, Path("/etc/slurm.toml"))
    text = config_to_toml(config)
    assert "[slurm]" in text and "[[hosts]]" not in text
    again = parse_config(text, Path("/etc/slurm.toml"))
    assert (again.slurm, again.node, again.cluster, again.job) == (
        config.slurm,
        config.node,
        config.cluster,
        config.job,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[slurm]\nnodes = 2\n[[hosts]]\nname = "a"\naddress = "10.0.0.1"\n',
            "[slurm] and [[hosts]]: Slurm picks the nodes of a [slurm] cluster; keep [slurm] "
            "or the [[hosts]] entries, not both",
        ),
        ("[slurm]\npartition = 'gpu'\n", "[slurm]: nodes: missing; how many nodes each run takes"),
        (
            "[slurm]\nnodes = 0\n",
            "[slurm]: nodes: expected a number of nodes ≥ 1, found 0 (an integer)",
        ),
        (
            '[slurm]\nnodes = 2\ntime = "1 day"\n',
            '[slurm]: time: expected a Slurm time limit: "MINUTES", "HH:MM:SS" or '
            '"DAYS-HH:MM:SS", found "1 day" (a string)',
        ),
        (
            '[slurm]\nnodes = 2\npartiton = "gpu"\n',
            '[slurm]: unknown key "partiton" — did you mean "partition"?',
        ),
        (
            '[cluster]\npartition = "gpu"\n[slurm]\nnodes = 2\n',
            '[cluster]: "partition" is Slurm\'s: set it in [slurm]',
        ),
        (
            "[slurm]\nnodes = 2\nnproc_per_node = 2\n",
            '[slurm]: "nproc_per_node" belongs in [job]',
        ),
        (
            "[cluster]\ngpus = 2\n[slurm]\nnodes = 2\n",
            "[cluster]: gpus: Slurm picks a node's GPUs; set [slurm] gpus_per_node",
        ),
        (
            "[cluster]\nmaster_port = 29500\n[slurm]\nnodes = 2\n",
            "[cluster]: master_port: a Slurm run's port comes from its job id, so that jobs "
            "sharing a node do not collide; leave it out",
        ),
        (
            '[slurm]\nnodes = 2\n[job]\nnproc_per_node = "gpus"\n',
            '[job]: nproc_per_node: "gpus" starts one process per GPU, but [slurm] asks for no '
            "GPUs; set [slurm] gpus_per_node, or nproc_per_node to a number",
        ),
        (
            '[slurm]\nnodes = 2\nsbatch_args = ["-N3"]\n',
            "[slurm]: sbatch_args[0]: '-N3': set it with [slurm] nodes",
        ),
        (
            '[slurm]\nnodes = 2\nsbatch_args = ["--mem=0", "--output=x.log"]\n',
            "[slurm]: sbatch_args[1]: '--output=x.log': ddptui sets --output itself for every run",
        ),
        (
            '[slurm]\nnodes = 2\nsbatch_args = ["--comment=my run"]\n',
            '[slurm]: sbatch_args[0]: expected one option such as "--mem=0" (no spaces or '
            'quotes), found "--comment=my run" (a string)',
        ),
        (
            '[slurm]\nnodes = 2\nconstraint = "a100\'"\n',
            '[slurm]: constraint: expected a Slurm constraint such as "a100&ib", found "a100\'" '
            "(a string): no quotes",
        ),
        (
            '[slurm]\nnodes = 2\nexclude = ["gpu 7"]\n',
            '[slurm]: exclude[0]: expected node names such as "gpu07" or "gpu[07-09]", found '
            '"gpu 7" (a string)',
        ),
        ("partition = 'gpu'\n[slurm]\nnodes = 2\n", '"partition" must be inside the [slurm] table'),
        (
            "[slurm]\nnodes = 2\ngpus_per_node = -1\n",
            "[slurm]: gpus_per_node: expected a number of GPUs ≥ 0, found -1 (an integer)",
        ),
    ],
)
def test_each_mistake_is_one_line_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _load(text)
    assert str(raised.value) == f"slurm.toml: {message}"


def test_the_loader_knows_a_slurm_file_by_its_table(tmp_path: Path) -> None:
    from ddptui.config import load_config

    path = tmp_path / "slurm.toml"
    path.write_text(SLURM)
    config = load_config(path)
    assert config.slurm is not None and config.hosts == ()
