"""docs/cli.md's "JSON documents" held to the code: every command with ``--json`` has its
subsection there, and every key its document holds, at any depth, is named in it as ``"key"``.

Each document is made by the code from data that fills it (every list holding something, every
optional part there: :attr:`Document.filled` says which) so that a key the code adds cannot
hide in a part the sample lacks. Subtrees whose keys are not ddptui's words are not held to the
page (:attr:`Document.not_ours`): a host's environment (the user's variable names), the probe's
facts (docs/checking.md's), each GPU's nvidia-smi fields, a heartbeat's rank numbers, and the
launch timeline (docs/events.md's)."""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ddptui.cli import build_parser
from ddptui.config import config_to_dict, load_config
from ddptui.config.load import parse_config
from ddptui.config.model import HostConfig
from ddptui.health import HostCheck
from ddptui.health.findings import ProbeFailure
from ddptui.present.runs import run_document
from ddptui.remote.status import Reach, Reachability
from ddptui.run.evidence.flight import analyse, read_dump
from ddptui.run.evidence.kept import StackDump
from ddptui.run.evidence.stacks import RankStack, parse_stacks
from ddptui.run.following.sample import sample_of
from ddptui.run.following.state import Hang, Judgement, RankAtHang, Straggler
from ddptui.run.following.updates import Heartbeat, HostSilent
from ddptui.run.record import (
    Attempt,
    Incident,
    NodeRecord,
    RunRecord,
    RunState,
    SchedulerJob,
    SetAside,
)
from ddptui.run.view import RunView
from tests.helpers.docs import DOCS
from tests.run.modelkit import exit_line
from tests.ui import scenes

ROOT = DOCS.parent
CLI = DOCS / "cli.md"
FIXTURES = ROOT / "tests" / "fixtures"
NEXT_HEADING = re.compile(r"^#{2,3} ", re.M)

AT = scenes.CREATED + 30.0
"""When the sampled run's hosts last spoke, and its incident was judged."""
FELL_OFF = (
    "[ 5021.331] NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus."
)
FAULTHANDLER = """\
Current thread 0x00007f2a9f4a3b80 (most recent call first):
  File "/venv/torch/distributed/distributed_c10d.py", line 3252 in all_reduce
  File "/w/runs/r1/code/train.py", line 40 in step
  File "/w/runs/r1/code/train.py", line 55 in <module>
"""


@dataclass(frozen=True)
class Document:
    """One ``--json`` document as the code makes it from data that fills it."""

    command: str
    made: Callable[[], Any]
    filled: tuple[str, ...]
    """Dotted paths (through lists) where the sample must hold something: its depth."""
    not_ours: frozenset[str] = frozenset()
    """Dotted paths whose insides name no key of ddptui's, so need not be on the page."""


def _docs_slurm_file() -> str:
    """The first hosts file of the docs with a ``[slurm]`` table, as tests/test_docs.py finds
    them: the one a Slurm user starts from."""
    blocks: Iterator[str] = (
        block
        for page in sorted(DOCS.glob("*.md"))
        for block in re.findall(r"^```toml\n(.*?)^```", page.read_text(), re.M | re.S)
    )
    return next(block for block in blocks if "[slurm]" in block)


def _config_of_ssh_hosts() -> dict[str, Any]:
    return config_to_dict(load_config(ROOT / "hosts.example.toml"))


def _config_of_slurm() -> dict[str, Any]:
    return config_to_dict(parse_config(_docs_slurm_file(), ROOT / "slurm.toml"))


def _check_of_ssh_hosts() -> dict[str, Any]:
    """The recorded H200 hosts (facts, findings, one timed out) and one whose probe failed."""
    report = scenes.health_report()
    failed = HostCheck(
        HostConfig("gpu-d", "192.0.2.5"),
        Reachability(Reach.OK),
        probe_failure=ProbeFailure("no JSON", exit_status=1, stderr_tail="ImportError: torch"),
    )
    return dataclasses.replace(report, checks=(*report.checks, failed)).to_json()


def _check_of_slurm() -> dict[str, Any]:
    return scenes.slurm_health()[1].to_json()


def _status_of_a_healed_run_that_hangs() -> dict[str, Any]:
    """The recorded run's four ranks (rank 0's NCCL error), each host's heartbeat (GPU health
    and a new Xid on gpu-a; on gpu-b a kernel log it cannot read), gpu-a's exit, gpu-b silent,
    an incident and a host set aside, a hang and a straggler."""
    model = scenes.run_model(state=RunState.HUNG)
    gpu = {"index": 0, "utilization.gpu": 97, "pci_bus_id": "00000000:00:06.0"}
    for host, first_rank, said in (
        ("gpu-a", 0, {"xids": [FELL_OFF]}),
        ("gpu-b", 2, {"kernel_log": "dmesg: Operation not permitted"}),
    ):
        ranks = {str(rank): {"state": "S", "cpu_pct": 1.5} for rank in (first_rank, first_rank + 1)}
        sample = {"procs": 3, "cpu_pct": 3.0, "rss_mib": 2900.0, "ranks": ranks, "gpus": [gpu]}
        model.apply(Heartbeat(host, AT, {1: True}, sample_of({**sample, **said})))
    model.apply(exit_line("gpu-a", 1))
    model.apply(HostSilent("gpu-b", 12.0, "connect timed out"))
    record = model.record
    record.timelines[0].stamp("gpu-a", "first_step", scenes.CREATED)
    record.incidents = [scenes.healed_incident(AT)]
    record.set_aside = [SetAside("gpu-b", "rank 3 was killed by SIGKILL", AT, "/w", "no answer")]
    hang = Hang(
        since=AT,
        window_s=300.0,
        step=120,
        ranks=(
            RankAtHang(0, "gpu-a", 120, "T", 0.0, "its process is stopped"),
            RankAtHang(1, "gpu-a", 120, "S", 95.0, None),
        ),
    )
    straggler = Straggler(1, "gpu-a", 0.45, AT - 60, "its GPU 1 is slowed by its own heat")
    judgement = dataclasses.replace(model.judgement(record), hang=hang, stragglers=(straggler,))
    return RunView.of(record, model, judgement).document(AT + 60)


def _slurm_record() -> RunRecord:
    """A Slurm run on two nodes: a requeued job, a recovery inside its allocation, a node set
    aside."""
    record = RunRecord("20261130-120000-slrm", 0.0, "", "trainer", "gloo", "", 4, [], [])
    record.nodes = [
        NodeRecord(name, name, rank, 2, f"/w/node{rank}", [], {})
        for rank, name in enumerate(("gpu1", "gpu2"))
    ]
    record.attempts = [
        Attempt(1, 1.0, 15041, scheduler=SchedulerJob("41"), allocation="gpu[1-3]"),
        Attempt(2, 2.0, 15041, scheduler=SchedulerJob("41", "COMPLETED"), allocation="gpu[1-3]"),
        Attempt(3, 3.0, 15043, scheduler=SchedulerJob("41", in_allocation=True)),
    ]
    record.incidents = [Incident(1, 1, 1.5, "lost", ("gpu3",), "silent", resumed_attempt=2)]
    record.set_aside = [SetAside("gpu3", "silent", 1.5)]
    return record


def _status_of_slurm() -> dict[str, Any]:
    record = _slurm_record()
    return RunView(record, Judgement.of_record(record), (), (), "", ()).document(10.0)


def _runs_of_slurm() -> list[dict[str, Any]]:
    return [run_document(_slurm_record(), 10.0)]


def _dump_of_a_hang() -> dict[str, Any]:
    """Two ranks' stacks alike, one rank without a stack, a host that did not answer, and the
    recorded flight recorders of a rank left behind (one of whose dumps did not read)."""
    alike = parse_stacks(FAULTHANDLER)
    stacks = (
        RankStack("node0", 0, 0, 1000, "faulthandler", alike),
        RankStack("node0", 0, 1, 1001, "faulthandler", alike),
        RankStack("node1", 1, 3, 77, error="no stack handler in this process: not signalled"),
    )
    recorded = FIXTURES / "flight" / "rank-behind"
    traces = [read_dump(rank, (recorded / f"rank_{rank}").read_bytes()) for rank in range(3)]
    return StackDump(
        "r1",
        AT,
        stacks,
        unanswered=("node2: connection refused",),
        saved_in=Path("/state/r1/dumps/t"),
        flight=tuple(analyse(traces, world_size=3)),
        flight_errors=("rank 5's flight-recorder dump: not a pickle",),
    ).document()


ENV = frozenset({"cluster.env", "hosts.env"})
DOCUMENTS = {
    "config": Document("config", _config_of_ssh_hosts, ("hosts.env", "job"), ENV),
    "config-slurm": Document("config", _config_of_slurm, ("cluster", "slurm", "recovery"), ENV),
    "check": Document(
        "check",
        _check_of_ssh_hosts,
        ("hosts.facts", "hosts.probe_failure", "hosts.master_port_reachable", "findings"),
        frozenset({"hosts.facts"}),
    ),
    "check-slurm": Document("check", _check_of_slurm, ("nodes.reason", "usable", "findings")),
    "status": Document(
        "status",
        _status_of_a_healed_run_that_hangs,
        (
            "attempts",
            "states",
            "launch",
            "nodes.exit",
            "nodes.not_answering",
            "nodes.xids",
            "nodes.sample.ranks",
            "nodes.sample.gpus",
            "nodes.sample.xids",
            "nodes.sample.kernel_log",
            "ranks.slow_cause",
            "ranks.last_line",
            "hang.ranks.why",
            "errors",
            "incidents.steps_redone",
            "effective_training_time_ratio",
            "set_aside.leftovers",
        ),
        frozenset({"launch", "nodes.sample.gpus", "nodes.sample.ranks"}),
    ),
    "status-slurm": Document(
        "status", _status_of_slurm, ("attempts.scheduler.in_allocation", "attempts.allocation")
    ),
    "runs": Document("runs", _runs_of_slurm, ("scheduler_jobs.attempts", "incidents", "set_aside")),
    "dump": Document(
        "dump",
        _dump_of_a_hang,
        (
            "saved_in",
            "groups.frames",
            "without_stack",
            "unanswered",
            "flight_recorder",
            "flight_recorder_errors",
        ),
    ),
}


def _commands_with_json() -> list[str]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [
        name
        for name, command in sub.choices.items()
        if any("--json" in action.option_strings for action in command._actions)
    ]


def _heading(command: str) -> str:
    return f"### `ddptui {command} --json`"


def _subsection(command: str) -> str:
    """The text under ``command``'s heading, up to the next heading of its level or above."""
    text = CLI.read_text()
    start = text.index(_heading(command)) + len(_heading(command))
    end = NEXT_HEADING.search(text, start)
    return text[start : end.start() if end else len(text)]


def _keys(value: Any, not_ours: frozenset[str], path: str = "") -> Iterator[str]:
    """The dotted path of every dict key in ``value`` (lists looked through), less what lies
    inside the paths of ``not_ours``."""
    if isinstance(value, list):
        for item in value:
            yield from _keys(item, not_ours, path)
    elif isinstance(value, dict):
        for key, inner in value.items():
            where = f"{path}.{key}" if path else key
            yield where
            if where not in not_ours:
                yield from _keys(inner, not_ours, where)


def _at(value: Any, path: str) -> list[Any]:
    """What ``value`` holds at the dotted ``path``, lists looked through."""
    found = [value]
    for key in path.split("."):
        items = [item for each in found for item in (each if isinstance(each, list) else [each])]
        found = [item[key] for item in items if isinstance(item, dict) and key in item]
    return found


def test_every_command_with_json_has_its_subsection_and_no_other_does() -> None:
    documented = re.findall(r"^### `ddptui (\S+) --json`$", CLI.read_text(), re.M)
    assert sorted(documented) == sorted(_commands_with_json())


def test_every_command_with_json_has_a_sample_here() -> None:
    assert {document.command for document in DOCUMENTS.values()} == set(_commands_with_json())


@pytest.mark.parametrize("case", sorted(DOCUMENTS))
def test_the_sample_fills_its_document(case: str) -> None:
    document = DOCUMENTS[case]
    made = document.made()
    empty = [
        path
        for path in document.filled
        if not any(value not in (None, "", [], {}) for value in _at(made, path))
    ]
    assert empty == [], f"the {case} sample has nothing at {empty}"


@pytest.mark.parametrize("case", sorted(DOCUMENTS))
def test_every_key_of_the_document_is_on_its_page(case: str) -> None:
    document = DOCUMENTS[case]
    said = _subsection(document.command)
    missing: dict[str, str] = {}
    for path in _keys(document.made(), document.not_ours):
        key = path.rsplit(".", 1)[-1]
        if f'"{key}"' not in said:
            missing.setdefault(key, path)
    named = ", ".join(f'"{key}" (at {path})' for key, path in sorted(missing.items()))
    assert missing == {}, f"{_heading(document.command)} in docs/cli.md does not name {named}"
