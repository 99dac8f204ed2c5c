"""A compromised host answering ``dump`` (the supervisor asks by itself after a failure or a
hang): whatever it sends, nothing runs on the head, nothing is written outside the dump's own
folder, and the other hosts' evidence is kept.

The real :func:`ddptui.run.evidence.dump.take` and :func:`~ddptui.run.evidence.kept.save` run
against :class:`PlayedHosts`, a transport that answers the node agent's ``dump`` and the reads of
flight-recorder files as each host of the test is told to; honest hosts send the recorded
dumps of a real gloo job (``tests/fixtures/flight``).
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.remote.commands import CommandResult
from ddptui.remote.files import UnreadableFile
from ddptui.run.evidence import dump as stack_dump
from ddptui.run.evidence import kept as kept_dump
from ddptui.run.evidence.flight import FlightDumpError, read_dump
from ddptui.run.record import Attempt, NodeRecord, RunRecord
from tests.fixtures.flight.hostile import evaluating_dump, recorded
from tests.run.hostile_answers import AnsweringHost

RUN_DIR = "/nonexistent/ddptui-runs/20990101-000000-host/node{}"


def _key(text: str) -> bytes:
    return b"X" + struct.pack("<I", len(text)) + text.encode()


def shared_references(depth: int) -> bytes:
    """525 bytes or so: ``input_sizes`` is a list of two references to a list of two
    references to … (``depth`` levels): 2**depth leaves to any walk over it."""
    nested = b"]q\x000"
    for level in range(depth):
        nested += b"](h" + bytes([level]) + b"h" + bytes([level]) + b"eq" + bytes([level + 1])
        nested += b"0"
    nested += b"h" + bytes([depth])
    entry = b"}(" + _key("collective_seq_id") + b"K\x05" + _key("profiling_name")
    entry += _key("gloo:all_reduce") + _key("input_sizes") + nested + _key("process_group")
    entry += b"h" + bytes([depth]) + b"u"
    return b"\x80\x02}(" + _key("entries") + b"](" + entry + b"eu."


@dataclass
class Played:
    """What one host answers: its ranks' stacks, the flight dumps it claims, their bytes."""

    ranks: Sequence[int]
    flight: Mapping[int, bytes] = field(default_factory=dict)
    claimed: Sequence[int] | None = None
    """Ranks named in the ``dump`` answer (the keys of ``flight`` unless given)."""
    answer: str | None = None
    """The whole ``dump`` answer, instead of an honest one."""
    nproc: int | None = None
    """Its processes in the run record (as many as ``ranks`` unless given)."""

    @property
    def processes(self) -> int:
        return len(self.ranks) if self.nproc is None else self.nproc


class PlayedHosts(AnsweringHost):
    """A transport whose hosts answer ``dump`` and serve their flight files as
    :class:`Played` says."""

    def __init__(self, played: Mapping[str, Played]) -> None:
        super().__init__({})
        self.played = played
        self.reads: list[tuple[str, str, int]] = []

    def answer(self, host: HostConfig, command: str) -> CommandResult:
        assert command == "dump", command
        played = self.played[host.name]
        if played.answer is not None:
            return CommandResult(0, played.answer, "")
        claimed = played.flight if played.claimed is None else played.claimed
        document = {
            "attempt": 1,
            "ranks": [
                {"rank": r, "pid": 1000 + r, "via": "faulthandler", "text": _stack(r)}
                | {"error": "", "note": ""}
                for r in played.ranks
            ],
            "flight": [[rank, len(played.flight.get(rank, b""))] for rank in claimed],
        }
        return CommandResult(0, json.dumps(document), "")

    async def read_file(
        self, host: HostConfig, path: str, *, max_bytes: int, timeout: float
    ) -> bytes:
        rank = int(path.rpartition("_")[2])
        self.reads.append((host.name, path, max_bytes))
        data = self.played[host.name].flight[rank]
        if len(data) > max_bytes:
            raise UnreadableFile(f"it is larger than ddptui reads ({max_bytes:,} bytes)")
        return data


def _stack(rank: int) -> str:
    return (
        f'Thread 0x00007f00 (most recent call first):\n  File "train.py", line {10 + rank} '
        "in step\n"
    )


def cluster(played: Mapping[str, Played]) -> tuple[Config, RunRecord]:
    hosts = tuple(HostConfig(name=name, address=f"10.0.0.{i}") for i, name in enumerate(played))
    config = Config(Path("hosts.toml"), ClusterConfig(), hosts, JobConfig())
    nodes = [
        NodeRecord(name, f"10.0.0.{i}", i, one.processes, RUN_DIR.format(i), ["torchrun"], {})
        for i, (name, one) in enumerate(played.items())
    ]
    record = RunRecord(
        id="20990101-000000-host",
        created=0.0,
        hosts_file="hosts.toml",
        entry="trainer",
        backend="gloo",
        master_addr="10.0.0.0",
        world_size=sum(one.processes for one in played.values()),
        args=[],
        nodes=nodes,
        attempts=[Attempt(number=1, started=0.0, master_port=29500)],
    )
    return config, record


def take(played: Mapping[str, Played]) -> tuple[kept_dump.StackDump, PlayedHosts]:
    config, record = cluster(played)
    hosts = PlayedHosts(played)
    return asyncio.run(stack_dump.take(config, record, hosts)), hosts


def honest(scenario: str = "rank-behind") -> dict[str, Played]:
    return {
        "node0": Played([0], {0: recorded(scenario, 0)}),
        "node1": Played([1], {1: recorded(scenario, 1)}),
        "node2": Played([2], {2: recorded(scenario, 2)}),
    }


def files_under(directory: Path) -> set[Path]:
    return set(directory.rglob("*"))


def test_a_dump_that_torch_s_analyser_would_evaluate_runs_nothing_and_leaves_no_torch_file(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "evaluated"
    played = honest()
    played["node0"] = Played([0], {0: evaluating_dump(marker)})
    taken, _ = take(played)
    dumps = tmp_path / "dumps"
    saved = kept_dump.save(taken, dumps)
    assert not marker.exists()
    assert saved.saved_in is not None and saved.saved_in.parent == dumps
    assert files_under(tmp_path) == {dumps, saved.saved_in, *saved.saved_in.iterdir()}
    names = sorted(path.name for path in saved.saved_in.iterdir())
    assert not [name for name in names if name.startswith("flight_")], names
    assert "flight-rank0.from-host" in names and kept_dump.FLIGHT_READING in names
    # The hostile group config is not read at all: the collectives still name rank 2.
    assert any(finding.odd_ranks == (2,) for finding in taken.flight), taken.flight


def test_honest_dumps_still_name_the_rank_behind_and_are_saved_read(tmp_path: Path) -> None:
    taken, _ = take(honest())
    (finding,) = taken.flight
    assert finding.odd_ranks == (2,)
    assert "rank 2 never entered #5 (gloo:all_reduce [[1024]]" in finding.text
    saved = kept_dump.save(taken, tmp_path)
    assert saved.saved_in is not None
    reading = json.loads((saved.saved_in / kept_dump.FLIGHT_READING).read_text())
    assert [trace["rank"] for trace in reading] == [0, 1, 2]
    assert reading[2]["collectives"][-1]["op"] == "gloo:broadcast"


def test_shared_references_cost_nothing_to_read() -> None:
    # On the landed code, depth 60 took 31 s and a MemoryError in json.dumps.
    trace = read_dump(0, shared_references(60))
    (collective,) = trace.collectives
    assert collective.sizes == "?" and collective.group == "?"
    assert len(shared_references(60)) < 1024


def test_a_flood_of_empty_lists_is_refused_within_its_budget() -> None:
    flood = b"\x80\x02(" + b"]" * (8 * 1024 * 1024) + b"l."
    # Empty lists cost more memory than their count: the memory budget refuses them first.
    with pytest.raises(FlightDumpError, match="more than 128 MiB of values"):
        read_dump(0, flood)


def test_a_host_speaks_for_its_own_ranks_only() -> None:
    played = honest()
    # node1 claims rank 0's stack and flight dump too (it would be read last and win).
    played["node1"] = Played([1, 0], {1: recorded("rank-behind", 1), 0: b"\x80\x02}."}, nproc=1)
    taken, hosts = take(played)
    assert [(stack.rank, stack.host) for stack in taken.stacks] == [
        (0, "node0"),
        (1, "node1"),
        (2, "node2"),
    ]
    assert taken.flight_dumps[0] == recorded("rank-behind", 0)
    assert [path for name, path, _ in hosts.reads if name == "node1"] == [
        RUN_DIR.format(1) + "/node/flight_1"
    ]
    said = "node1 answered for ranks 0, which are not its own (1): set aside"
    assert said in taken.flight_errors


def test_a_host_s_flight_bytes_are_budgeted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack_dump, "HOST_FLIGHT_BYTES", 4000)
    played = {"node0": Played([0, 1, 2], {r: recorded("rank-behind", r) for r in range(3)})}
    taken, hosts = take(played)
    # 1,759 + 1,759 bytes fit in 4,000; the third dump is read with the 482 left, and refused.
    assert [size for _, _, size in hosts.reads] == [4000, 4000 - 1759, 4000 - 2 * 1759]
    assert sorted(taken.flight_dumps) == [0, 1]
    assert any("rank 2: node0: " in e and "larger than" in e for e in taken.flight_errors)


def test_one_host_s_garbage_costs_that_host_only() -> None:
    played = honest()
    played["node1"] = Played([1], answer='{"attempt": 1, "ranks": [], "flight": ' + "9" * 5000)
    played["node2"] = Played([2], {2: b"\x80\x02}(X\x07\x00\x00\x00entries]J" + b"u."})
    taken, _ = take(played)
    assert [stack.rank for stack in taken.stacks] == [0, 2]
    assert len(taken.unanswered) == 1 and taken.unanswered[0].startswith("node1")
    assert any(e.startswith("rank 2's flight-recorder dump: ") for e in taken.flight_errors)
    assert taken.flight[0].text.startswith("no flight-recorder dump from ranks 1–2")


def test_an_integer_of_5000_digits_in_a_dump_is_that_dump_s_error() -> None:
    entry = b'{"entries": [{"collective_seq_id": ' + b"9" * 5000 + b', "profiling_name": "x"}]}'
    with pytest.raises(FlightDumpError):
        read_dump(0, entry)
    long_int = b"\x80\x02}(" + _key("entries") + b"](}(" + _key("collective_seq_id")
    long_int += b"\x8a\xff" + b"\x01" * 255 + _key("profiling_name") + _key("x") + b"ueu."
    with pytest.raises(FlightDumpError, match="an integer of 255 bytes"):
        read_dump(0, long_int)
