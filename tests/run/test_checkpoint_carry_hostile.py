"""A host that lies in its checkpoint listing is heard only about itself, never relayed.

Issue 41, finding 1: a host answered ``list-files`` with ``torch.py`` under ``ckpt/*.pt``, and the
resume copied it into every other node's code directory (every rank's ``sys.path[0]``). Each
trick a host has is tried below: first on the pure planning, then through the real
:func:`~ddptui.run.backends.ssh.launcher.carry_checkpoints` with a host that answers what it
likes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.remote.commands import CommandResult
from ddptui.run.agent.answers import listed_files
from ddptui.run.backends.ssh.launcher import LaunchError, carry_checkpoints
from ddptui.run.checkpoints import (
    AMONG_CODE,
    APART_FROM_NODE_0,
    MODULE,
    STAGED_CODE,
    Copy,
    CopyPlan,
    Held,
    Refused,
    matches,
    plan_copies,
)
from ddptui.run.record import NodeRecord, RunRecord
from tests.run.hostile_answers import AnsweringHost

YEAR_2100 = 4_102_444_800.0
NOW = 1_700_000_000.0
SAVED = NOW - 600
"""When node 0 saved its checkpoint."""


# --- what a host lists ------------------------------------------------------------------------


def test_a_path_its_glob_does_not_match_makes_the_listing_garbage() -> None:
    # The finding: `import torch` would run node 2's code on every rank.
    assert listed_files({"ckpt/*.pt": [["torch.py", 120, YEAR_2100]]}, ["ckpt/*.pt"]) is None
    # Nor one level down or up from where the glob looks.
    assert listed_files({"*.pt": [["ckpt/a.pt", 1, NOW]]}, ["*.pt"]) is None
    assert listed_files({"ckpt/*.pt": [["a.pt", 1, NOW]]}, ["ckpt/*.pt"]) is None
    honest = {"ckpt/*.pt": [["ckpt/a.pt", 1, NOW]]}
    assert listed_files(honest, ["ckpt/*.pt"]) == {"ckpt/*.pt": {"ckpt/a.pt": Held(1, NOW)}}


def test_a_path_out_of_normal_form_makes_the_listing_garbage() -> None:
    # The lister's paths are pathlib's, relative to the code directory: none of these.
    for path in ("../x", "a//b", "./a", "a/./b", "a/", "/etc/x", "a/../b", ".", ""):
        assert listed_files({"**/*": [[path, 1, NOW]]}, ["**/*"]) is None, path


def test_a_name_no_command_line_carries_is_left_out_not_copied() -> None:
    weird = ["ckpt/a\n.pt", "ckpt/a\x1b]0;x\x07.pt", "ckpt/a\\b.pt", "ckpt/\udcff.pt"]
    listing = {"ckpt/*": [[path, 1, NOW] for path in [*weird, "ckpt/b.pt"]]}
    assert listed_files(listing, ["ckpt/*"]) == {"ckpt/*": {"ckpt/b.pt": Held(1, NOW)}}


GLOBS = [
    "*.pt",
    "*",
    "ckpt/*.pt",
    "*/*.pt",
    "**/*.pt",
    "ckpt/**/*",
    "out/checkpoint-*/*",
    "ckpt/epoch_[0-9].pt",
    "ckpt/epoch_[!0-9].pt",
    "./ckpt//*.pt",
    "CKPT/*.pt",
    ".hidden/*",
    "snapshot.pt",
]


def test_the_matcher_lists_what_pathlib_lists(tmp_path: Path) -> None:
    files = [
        "snapshot.pt",
        ".hidden.pt",
        "torch.py",
        "ckpt/a.pt",
        "ckpt/.b.pt",
        "ckpt/epoch_1.pt",
        "ckpt/epoch_x.pt",
        "ckpt/deep/c.pt",
        "ckpt/deep/er/d.pt",
        ".hidden/e.pt",
        "out/checkpoint-5/model.safetensors",
        "out/checkpoint-5/rng_state_1.pth",
    ]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    for glob in GLOBS:
        listed = {
            path.relative_to(tmp_path).as_posix() for path in tmp_path.glob(glob) if path.is_file()
        }
        assert {name for name in files if matches(name, glob)} == listed, glob
    # A glob that ends in `**` lists files too from Python 3.13 on: never narrower than that.
    ckpt = [name for name in files if name.startswith("ckpt/")]
    assert [name for name in files if matches(name, "ckpt/**")] == ckpt


# --- what is planned --------------------------------------------------------------------------


def _plan(listings: Mapping[int, Mapping[str, Held]], staged: Sequence[str] = ()) -> CopyPlan:
    return plan_copies(listings, staged={"train.py", *staged}, latest=NOW)


def test_a_file_of_the_staged_code_is_never_copied_even_when_a_glob_matches_it() -> None:
    shipped, changed = Held(100, SAVED), Held(666, SAVED)
    # Node 2 changed its train.py; node 0's goes nowhere either: its word is no launch.
    listings = {0: {"train.py": shipped}, 1: {"train.py": shipped}, 2: {"train.py": changed}}
    assert _plan(listings) == CopyPlan([], [Refused("train.py", 0, (2,), STAGED_CODE)])
    # Node 0 lost it: node 2's is not the code either.
    assert _plan({0: {}, 1: {}, 2: {"train.py": changed}}) == CopyPlan(
        [], [Refused("train.py", 2, (0, 1), STAGED_CODE)]
    )
    # No module is carried, whoever holds it: the ranks import from the code directory.
    modules = ["torch.py", "torch/__init__.py", "numpy/core.pyc", "ext.cpython-311-x86_64.so"]
    assert _plan({0: dict.fromkeys(modules, changed), 1: {}}) == CopyPlan(
        [], [Refused(module, 0, (1,), MODULE) for module in sorted(modules)]
    )
    # Nor, where node 0 lacks it, any other file beside the code: a config the script reads.
    assert _plan({0: {"snapshot.pt": shipped}, 1: {}, 2: {"config.yaml": changed}}) == CopyPlan(
        [Copy("snapshot.pt", 0, (1, 2), shipped)], [Refused("config.yaml", 2, (0, 1), AMONG_CODE)]
    )
    listings = {0: {"lib/ckpt.pt": shipped}, 1: {"lib/data.json": changed}}
    assert _plan(listings, ["lib/x.py"]) == CopyPlan(
        [Copy("lib/ckpt.pt", 0, (1,), shipped)], [Refused("lib/data.json", 1, (0,), AMONG_CODE)]
    )


def test_no_node_but_node_0_starts_a_checkpoint_of_its_own() -> None:
    saved = Held(100, SAVED)
    listings = {
        0: {"out/checkpoint-500/model.safetensors": saved},
        1: {},
        2: {"out/checkpoint-99999/model.safetensors": Held(666, SAVED)},
    }
    assert _plan(listings) == CopyPlan(
        [Copy("out/checkpoint-500/model.safetensors", 0, (1, 2), saved)],
        [Refused("out/checkpoint-99999/model.safetensors", 2, (0, 1), APART_FROM_NODE_0)],
    )


def test_the_trainer_s_rng_state_of_each_rank_is_still_carried() -> None:
    # The Hugging Face Trainer: rank 0 writes the model, each rank its RNG state, on its host;
    # rank 2's a moment after node 0's last file.
    model, rng_0 = Held(1 << 20, SAVED), Held(14_000, SAVED + 1)
    rng_1, rng_2 = Held(14_000, SAVED + 0.5), Held(14_000, SAVED + 1.25)
    listings = {
        0: {"out/checkpoint-500/model.safetensors": model, "out/checkpoint-500/rng_0.pth": rng_0},
        1: {"out/checkpoint-500/rng_1.pth": rng_1},
        2: {"out/checkpoint-500/rng_2.pth": rng_2},
    }
    assert _plan(listings) == CopyPlan(
        [
            Copy("out/checkpoint-500/model.safetensors", 0, (1, 2), model),
            Copy("out/checkpoint-500/rng_0.pth", 0, (1, 2), rng_0),
            Copy("out/checkpoint-500/rng_1.pth", 1, (0, 2), rng_1),
            # Dated as node 0's newest there, so as never to be newer than its checkpoint.
            Copy("out/checkpoint-500/rng_2.pth", 2, (0, 1), rng_0),
        ],
        [],
    )


def test_no_copy_is_dated_after_the_head_s_clock_nor_after_node_0_s_newest_beside_it() -> None:
    listings = {
        0: {"snapshot.pt": Held(10, YEAR_2100), "ckpt/model.pt": Held(10, SAVED)},
        1: {"ckpt/rng_1.pt": Held(10, YEAR_2100)},
    }
    assert _plan(listings).copies == [
        Copy("ckpt/model.pt", 0, (1,), Held(10, SAVED)),
        # Beside node 0's checkpoint, never newer than it: no script picks it as the newest.
        Copy("ckpt/rng_1.pt", 1, (0,), Held(10, SAVED)),
        Copy("snapshot.pt", 0, (1,), Held(10, NOW)),
    ]
    # To the millisecond, as listed, so that the copies read back equal: nothing more to do.
    at = plan_copies(
        {0: {"a.pt": Held(1, 2000.0)}, 1: {"a.pt": Held(1, 1000.123)}},
        staged=(),
        latest=1000.1234,
    )
    assert at == CopyPlan([], [])


# --- through the real carry-over, a compromised host answering ---------------------------------


class CompromisedCluster(AnsweringHost):
    """Hosts that list what ``listings`` says (host → the ``files`` document), and whose copies
    are only recorded: (source, target, path, size, mtime) each."""

    def __init__(self, listings: Mapping[str, Any]) -> None:
        super().__init__({})
        self.listings = listings
        self.relayed: list[tuple[str, str, str, int, float]] = []

    def answer(self, host: HostConfig, command: str) -> CommandResult:
        assert command == "list-files", command
        return CommandResult(0, json.dumps({"files": self.listings[host.name]}) + "\n", "")

    async def relay(
        self,
        source: HostConfig,
        source_argv: Sequence[str],
        target: HostConfig,
        target_argv: Sequence[str],
        *,
        timeout: float,
    ) -> CommandResult:
        path, size, mtime = target_argv[-3:]
        self.relayed.append((source.name, target.name, path, int(size), float(mtime)))
        return CommandResult(0, json.dumps({"copied": int(size)}), "")


def _run(tmp_path: Path, globs: tuple[str, ...]) -> tuple[Config, RunRecord]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('training')\n")
    job = JobConfig(script=project / "train.py", checkpoint_files=globs)
    hosts = tuple(HostConfig(name=name, address=f"192.0.2.{n}") for n, name in enumerate("abc"))
    nodes = [
        NodeRecord(host.name, host.address, rank, 1, f"/runs/r1/node{rank}", [], {})
        for rank, host in enumerate(hosts)
    ]
    config = Config(tmp_path / "hosts.toml", ClusterConfig(), hosts, job)
    return config, RunRecord("r1", 0.0, "", "script", "gloo", "", 3, [], nodes)


def _carry(cluster: CompromisedCluster, config: Config, record: RunRecord) -> list[str]:
    said: list[str] = []
    asyncio.run(carry_checkpoints(cluster, config, record, say=said.append))  # type: ignore[arg-type]
    return said


def test_a_host_that_lists_torch_py_as_a_checkpoint_stops_the_resume_and_nothing_is_copied(
    tmp_path: Path,
) -> None:
    config, record = _run(tmp_path, ("ckpt/*.pt",))
    cluster = CompromisedCluster(
        {
            "a": {"ckpt/*.pt": [["ckpt/epoch3.pt", 7, SAVED]]},
            "b": {"ckpt/*.pt": []},
            "c": {"ckpt/*.pt": [["torch.py", 120, YEAR_2100]]},
        }
    )
    with pytest.raises(LaunchError, match=r"checkpoint files: c answered garbage to list-files"):
        _carry(cluster, config, record)
    assert cluster.relayed == []


def test_a_host_s_own_checkpoint_module_and_date_are_refused_and_said(tmp_path: Path) -> None:
    config, record = _run(tmp_path, ("out/checkpoint-*/*", "*.py"))
    listings: dict[str, dict[str, list[list[object]]]] = {
        "a": {
            "out/checkpoint-*/*": [["out/checkpoint-5/model.safetensors", 100, SAVED]],
            "*.py": [["train.py", 19, SAVED]],
        },
        "b": {"out/checkpoint-*/*": [], "*.py": [["train.py", 19, SAVED]]},
        "c": {
            "out/checkpoint-*/*": [
                ["out/checkpoint-5/rng_state_2.pth", 14, YEAR_2100],
                ["out/checkpoint-99999/model.safetensors", 666, YEAR_2100],
            ],
            "*.py": [["torch.py", 120, YEAR_2100], ["train.py", 666, YEAR_2100]],
        },
    }
    cluster = CompromisedCluster(listings)
    assert _carry(cluster, config, record) == [
        "warning: not copying out/checkpoint-99999/model.safetensors from c to a, b: "
        + APART_FROM_NODE_0,
        "warning: not copying torch.py from c to a, b: " + MODULE,
        "warning: not copying train.py from a to c: " + STAGED_CODE,
        "copied out/checkpoint-5/model.safetensors (100 bytes) from a to b, c",
        "copied out/checkpoint-5/rng_state_2.pth (14 bytes) from c to a, b",
    ]
    assert cluster.relayed == [
        ("a", "b", "/runs/r1/code/out/checkpoint-5/model.safetensors", 100, SAVED),
        ("a", "c", "/runs/r1/code/out/checkpoint-5/model.safetensors", 100, SAVED),
        # Dated as node 0's checkpoint beside it, not in 2100.
        ("c", "a", "/runs/r1/code/out/checkpoint-5/rng_state_2.pth", 14, SAVED),
        ("c", "b", "/runs/r1/code/out/checkpoint-5/rng_state_2.pth", 14, SAVED),
    ]
