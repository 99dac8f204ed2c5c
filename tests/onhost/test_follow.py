"""The node agent's follower, run in-process on real files: byte offsets, whole lines, caps.

The agent is what a host runs; these tests call its functions directly and read what it would
have sent, then feed that to the head's parser (HostFollower._parse) as the channel would.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig
from ddptui.layout import HostFiles
from ddptui.onhost import common, processes
from ddptui.onhost import follow as following
from ddptui.probe.facts import MAX_GPUS
from ddptui.remote.programs import agent_program
from ddptui.run.following.files import HostFollower
from ddptui.run.following.updates import FileLine, Heartbeat
from tests.fixtures.gpu import H200_IDLE_SAMPLE, nvidia_smi_double
from tests.fixtures.nvml import pynvml_double

Sent = pytest.CaptureFixture[str]
_CONFIG = Config(Path("hosts.toml"), ClusterConfig(), (HostConfig("a", "127.0.0.1"),), JobConfig())
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
_FILES = HostFiles(range(8), attempts=1)


def _documents(sent: Sent) -> list[dict[str, object]]:
    return [json.loads(line) for line in sent.readouterr().out.splitlines()]


def test_only_whole_lines_are_sent_and_offsets_resume_exactly(tmp_path: Path, capsys: Sent) -> None:
    events = tmp_path / "events" / "rank0.jsonl"
    events.parent.mkdir()
    events.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c"')
    state = following.Followed(0)
    following.read_new(tmp_path, "events/rank0.jsonl", state)
    assert [(d["t"], d["o"]) for d in _documents(capsys)] == [('{"a": 1}', 9), ('{"b": 2}', 18)]
    with events.open("ab") as handle:
        handle.write(b": 3}\n")
    following.read_new(tmp_path, "events/rank0.jsonl", state)
    assert [d["t"] for d in _documents(capsys)] == ['{"c": 3}']
    # A follower restarted at the offset the head kept sends nothing twice.
    again = following.Followed(18)
    following.read_new(tmp_path, "events/rank0.jsonl", again)
    assert [d["t"] for d in _documents(capsys)] == ['{"c": 3}']


def test_a_huge_line_is_cut_and_the_rest_skipped(tmp_path: Path, capsys: Sent) -> None:
    log = tmp_path / "big.log"
    log.write_bytes(b"x" * (common.MAX_LINE * 3) + b"\nnext\n")
    state = following.Followed(0)
    following.read_new(tmp_path, "big.log", state)
    documents = _documents(capsys)
    assert len(documents[0]["t"]) == common.MAX_LINE and documents[0]["cut"] is True  # type: ignore[arg-type]
    assert [d["t"] for d in documents[1:]] == ["next"]
    assert state.offset == log.stat().st_size


def test_a_last_line_without_newline_is_sent_once_the_file_settles(
    tmp_path: Path, capsys: Sent, monkeypatch: pytest.MonkeyPatch
) -> None:
    error = tmp_path / "error.json"
    error.write_bytes(b'{"message": "boom"}')
    now = [100.0]
    monkeypatch.setattr(following.time, "monotonic", lambda: now[0])
    state = following.Followed(0)
    following.read_new(tmp_path, "error.json", state)
    assert _documents(capsys) == []
    now[0] += common.SETTLED_S
    following.read_new(tmp_path, "error.json", state)
    assert [d["t"] for d in _documents(capsys)] == ['{"message": "boom"}']


def test_offsets_of_any_size_reach_the_agent_on_stdin(tmp_path: Path) -> None:
    # 4,096 offsets of 200-character paths: 0.8 MiB, far past the 128 KiB one argv may hold.
    offsets = {f"events/rank{index}-{'x' * 180}.jsonl": 7 for index in range(4096)}
    offsets["events/rank0.jsonl"] = 9
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "rank0.jsonl").write_bytes(b'{"a": 1}\n{"b": 2}\n')
    with _follower(tmp_path, offsets) as (_, out):
        lines = [json.loads(out.readline()) for _ in range(2)]
    sent = [line for line in lines if line["k"] == "line"]
    assert [(line["f"], line["t"]) for line in sent] == [("events/rank0.jsonl", '{"b": 2}')]


def _sent_until_exit(run_dir: Path, *args: str) -> list[tuple[str, int, str]]:
    """What the agent sends of ``run_dir``'s files, up to the node's exit status: (file,
    offset, what: a step's number or another line's event type or text)."""
    sent = []
    with _follower(run_dir, {}, *args) as (_, out):
        while not sent or sent[-1][0] != "node/attempt-1.exit":
            document = json.loads(out.readline())
            if document["k"] == "line":
                text = document["t"]
                what = text if text.isdigit() else json.loads(text)["type"]
                if what == "step":
                    what = str(json.loads(text)["step"])
                sent.append((document["f"], document["o"], what))
    return sent


def test_asked_to_thin_the_agent_sends_a_fast_rank_s_steps_thinned_and_every_other_line(
    tmp_path: Path,
) -> None:
    # 300 steps at 50 a second, as the bundled trainer writes them, then its done event.
    events = [{"v": 1, "type": "start", "rank": 0, "time": 1000.0}]
    events += [
        {"v": 1, "type": "step", "rank": 0, "time": 1000.0 + step / 50, "step": step}
        for step in range(1, 301)
    ]
    events.append({"v": 1, "type": "done", "rank": 0, "time": 1006.1, "step": 300})
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "rank0.jsonl").write_text(
        "".join(json.dumps(event) + "\n" for event in events)
    )
    (tmp_path / "node").mkdir()
    (tmp_path / "node" / "attempt-1.exit").write_text("0\n")

    every = _sent_until_exit(tmp_path)
    assert [what for _, _, what in every] == ["start", *map(str, range(1, 301)), "done", "0"]
    thinned = _sent_until_exit(tmp_path, "thin")
    steps = [int(what) for _, _, what in thinned if what.isdigit() and what != "0"]
    assert thinned[0][2] == "start" and [what for _, _, what in thinned[-2:]] == ["done", "0"]
    assert steps[0] == 1 and steps[-1] == 300, "the first or the last step was not sent"
    assert steps == sorted(steps) and len(steps) < 150, steps
    # The pace is known after 2 s of the rank's own time: 50 steps a second, 64 steps apart.
    assert all(step % 64 == 0 for step in steps if 100 < step < 300), steps
    offsets = [offset for path, offset, _ in thinned if path.startswith("events/")]
    assert offsets == sorted(offsets)


def test_a_heartbeat_says_whether_lines_written_before_it_are_still_unsent(
    tmp_path: Path,
) -> None:
    # 2.5 pieces of the agent's reading: the first heartbeat comes after the first piece.
    line = b'{"type": "step", "loss": 0.5}' + b" " * 70
    count = (common.READ_CHUNK * 5 // 2) // (len(line) + 1)
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "rank0.jsonl").write_bytes((line + b"\n") * count)
    follower = HostFollower(_CONFIG, HostConfig("a", "127.0.0.1"), str(tmp_path), _FILES)
    beats: list[tuple[int, bool]] = []
    sent = 0
    argv = [sys.executable, "-", "follow", str(tmp_path)]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as agent_process:
        assert agent_process.stdin is not None and agent_process.stdout is not None
        agent_process.stdin.write(agent_program(None).encode())
        agent_process.stdin.close()
        try:
            while not beats or beats[-1][1]:
                update = follower._parse(agent_process.stdout.readline().rstrip(b"\n"))
                if isinstance(update, FileLine):
                    sent += 1
                elif isinstance(update, Heartbeat):
                    beats.append((sent, update.behind))
        finally:
            agent_process.kill()
    assert beats[0][1] is True and beats[0][0] < count
    assert beats[-1] == (count, False)


def test_only_the_run_s_files_are_followed(tmp_path: Path) -> None:
    for relative in (
        "events/rank3.jsonl",
        "logs/attempt-2/none_x/attempt_0/1/stderr.log",
        "logs/attempt-2/none_x/attempt_0/1/error.json",
        "node/attempt-2.exit",
        "node/attempt-2.out",
        "node/attempt-2.pgid",
        "checkpoints/ckpt-1.pt",
        "code/trainer/main.py",
    ):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("")
    assert sorted(following.followed_files(tmp_path)) == [
        "events/rank3.jsonl",
        "logs/attempt-2/none_x/attempt_0/1/error.json",
        "logs/attempt-2/none_x/attempt_0/1/stderr.log",
        "node/attempt-2.exit",
        "node/attempt-2.out",
    ]


def test_the_head_parses_what_was_sent_and_never_repeats_a_line(
    tmp_path: Path, capsys: Sent
) -> None:
    (tmp_path / "node").mkdir()
    (tmp_path / "node" / "attempt-1.exit").write_text("0\n")
    following.read_new(tmp_path, "node/attempt-1.exit", following.Followed(0))
    raw = capsys.readouterr().out.splitlines()[0].encode()
    follower = HostFollower(_CONFIG, HostConfig("a", "127.0.0.1"), str(tmp_path), _FILES)
    assert follower._parse(raw) == FileLine("a", "node/attempt-1.exit", 2, "0")
    assert follower._parse(raw) is None
    for garbage in (b"", b"[]", b"{}", b'{"k": "line", "f": 1}', b"\xff" * 10, b"[" * 50000):
        assert follower._parse(garbage) is None
    assert follower.garbled == 6
    assert follower.offsets == {"node/attempt-1.exit": 2}


def test_processes_are_found_by_the_run_they_inherit(tmp_path: Path) -> None:
    child_env = {**os.environ, common.RUN_MARK: str(tmp_path), common.ATTEMPT_MARK: "3"}

    with subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], env=child_env
    ) as child:
        try:
            # Looked for again for a while: Popen returns once exec closed the child's
            # close-on-exec pipe, before the kernel set up its new environment; on a loaded
            # machine /proc/PID/environ was once still empty then.
            deadline = time.monotonic() + 10
            found: list[tuple[int, int]] = []
            while not found and time.monotonic() < deadline:
                found = [
                    (pid, attempt) for pid, _, attempt, _, _ in processes.run_processes(tmp_path)
                ]
                time.sleep(0.05)
            assert found == [(child.pid, 3)]
        finally:
            child.kill()


def test_gpu_samples_arrive_typed_and_what_is_no_number_is_left_out() -> None:
    # The agent's row for the recorded H200 (tests/fixtures/gpu/h200_idle/query-gpu-extra.csv),
    # a GPU whose nvidia-smi printed no values, and a host's garbage.
    recorded = (FIXTURES / "gpu" / "h200_idle" / "query-gpu-extra.csv").read_text().strip()
    names = following.GpuSampler.SMI_QUERY.split(",")
    h200 = dict(zip(names, (cell.strip() for cell in recorded.split(",")), strict=True))
    unsupported = {**h200, "index": "1", "power.draw": "[N/A]", "clocks.sm": "[Not Supported]"}
    hostile = {"index": "x", "memory.used": "nan", "memory.total": "inf", "pstate": "P" * 99}
    sample = {"cpu_pct": 3.5, "gpus": [h200, unsupported, hostile, "gpu", 7] + [h200] * 100}
    document = {"k": "hb", "time": 1.0, "groups": {}, "sample": sample}
    follower = HostFollower(_CONFIG, HostConfig("a", "127.0.0.1"), "/r", _FILES)

    beat = follower._parse(json.dumps(document).encode())

    assert isinstance(beat, Heartbeat)
    gpus = beat.sample["gpus"]
    assert gpus[0] == {
        **{key: int(float(value)) for key, value in h200.items() if key != "pstate"},
        "power.draw": 79.39,
        "pstate": "P0",
    }
    assert "power.draw" not in gpus[1] and "clocks.sm" not in gpus[1] and gpus[1]["index"] == 1
    assert gpus[2] == {"pstate": "P" * 32}
    # The first MAX_GPUS entries are read, and the two that are no GPU at all left out.
    assert len(gpus) == MAX_GPUS - 2


def test_the_follower_goes_within_a_round_once_nobody_reads_it(tmp_path: Path) -> None:
    # As sshd does when the head closes the channel: the pipe's reading end is closed. The
    # follower had just sent a heartbeat and has nothing new to write for the next 2 s.
    (tmp_path / "events").mkdir()
    with _follower(tmp_path, {}) as (follower, out):
        assert json.loads(out.readline())["k"] == "hb"
        out.close()
        closed = time.monotonic()
        assert follower.wait(timeout=common.HEARTBEAT_S) == 0
        assert time.monotonic() - closed < common.HEARTBEAT_S / 2


@contextlib.contextmanager
def _follower(
    run_dir: Path, offsets: dict[str, int], *args: str
) -> Iterator[tuple[subprocess.Popen[str], IO[str]]]:
    """The agent's ``follow`` on ``run_dir`` (with ``args`` after it) as a host runs it (the
    program on stdin), killed when the block ends; it and its output."""
    with subprocess.Popen(
        [sys.executable, "-", "follow", str(run_dir), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as follower:
        assert follower.stdin is not None and follower.stdout is not None
        follower.stdin.write(agent_program(offsets))
        follower.stdin.close()
        try:
            yield follower, follower.stdout
        finally:
            follower.kill()


class _CountedNvml:
    """The pynvml double answering as ``machine``, counting the calls made into it."""

    def __init__(self, machine: str) -> None:
        self.module = types.ModuleType("pynvml")
        exec(compile(pynvml_double(machine), "pynvml.py", "exec"), self.module.__dict__)
        self.calls: collections.Counter[str] = collections.Counter()
        for name in dir(self.module):
            if name.startswith("nvml"):
                setattr(self.module, name, self._counted(name, getattr(self.module, name)))

    def _counted(self, name: str, call: Any) -> Any:
        def counted(*args: Any) -> Any:
            self.calls[name] += 1
            return call(*args)

        return counted


def _heartbeat_gpus(row: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as the head reads them from a heartbeat."""
    document = {"k": "hb", "time": 1.0, "groups": {}, "sample": {"gpus": row}}
    follower = HostFollower(_CONFIG, HostConfig("a", "127.0.0.1"), "/r", _FILES)
    beat = follower._parse(json.dumps(document).encode())
    assert isinstance(beat, Heartbeat)
    return list(beat.sample["gpus"])


def test_nvml_samples_keep_their_handles_and_carry_each_gpu_s_health(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nvml = _CountedNvml("h100x8_faults")
    monkeypatch.setitem(sys.modules, "pynvml", nvml.module)
    sampler = following.GpuSampler()
    samples = [sampler.sample() for _ in range(following.GpuSampler.HEALTH_EVERY + 1)]
    # Opened once: a sample is calls into the driver, no process and no new handle.
    assert (nvml.calls["nvmlInit"], nvml.calls["nvmlDeviceGetHandleByIndex"]) == (1, 8)
    # NVLink's calls (18 links × 5 on each of 8 GPUs) only every HEALTH_EVERY samples.
    assert nvml.calls["nvmlDeviceGetNvLinkState"] == 2 * 8 * 18
    first, between = samples[0], samples[1]
    assert first is not None and between is not None
    assert [row["nvlink_errors"] for row in between] == [0, 0, 0, 0, 0, 0, 1234, 0]
    gpus = _heartbeat_gpus(first)
    assert gpus[1] == {
        "index": 1,
        "memory.used": 520,
        "memory.total": 81559,
        "utilization.gpu": 97,
        "utilization.memory": 41,
        "temperature.gpu": 91,
        "power.draw": 455,
        "power.limit": 700,
        "clocks.sm": 1215,
        "clocks.max.sm": 1980,
        "pstate": "P0",
        "ecc.errors.uncorrected.volatile.total": 0,
        "pci_bus_id": "0000:2a:00",
        "throttle_reasons": 0x4C,
        "reset_pending": 0,
        "remap_failed": 0,
        "pcie_replays": 0,
        "nvlink_errors": 0,
        "nvlinks_down": 0,
    }
    assert (gpus[2]["reset_pending"], gpus[2]["ecc.errors.uncorrected.volatile.total"]) == (1, 2)
    assert (gpus[4]["nvlinks_down"], gpus[5]["remap_failed"], gpus[3]["pcie_replays"]) == (
        1,
        1,
        117,
    )


def test_nvidia_smi_s_numbers_leave_the_host_typed_as_the_head_keeps_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A host without NVML: the recorded H200's nvidia-smi answers the sample's query.
    smi = tmp_path / "nvidia-smi"
    smi.write_text(nvidia_smi_double("h200_idle"))
    smi.chmod(0o755)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    rows = following.GpuSampler().smi_rows(str(smi))

    assert rows == [H200_IDLE_SAMPLE]
    # What the head keeps is what was sent: nothing left for it to convert.
    assert _heartbeat_gpus(rows) == rows
    # What the driver would not say is left out, as NVML's rows leave it out.
    assert [following.smi_value(name, cell) for name, cell in (
        ("power.draw", " [N/A]"), ("clocks.sm", "[Not Supported]"), ("memory.used", " nan"),
        ("pstate", " P8"), ("throttle", "0x4"),
    )] == [None, None, None, "P8", None]  # fmt: skip


def test_a_host_without_nvml_or_nvidia_smi_sends_no_gpu_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert following.GpuSampler().sample() is None


def test_the_kernel_log_is_read_from_its_end_for_xid_lines_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "kmsg"
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off"
    log.write_text(f"4,100,5000,-;{xid} (before the watch)\n")
    monkeypatch.setenv("DDPTUI_KERNEL_LOG", str(log))
    watch = following.KernelLogWatch()
    assert watch.sample() == {}
    with log.open("a") as kernel:
        kernel.write("6,101,5001,-;eth0: link up\n")
        kernel.write(f"4,102,5002,-;{xid} the bus.\n4,103,5003,-;{xid}")
        kernel.flush()
        assert watch.sample() == {"xids": [f"4,102,5002,-;{xid} the bus."]}
        # A line is sent once it is whole.
        kernel.write(" the bus.\n" + f"4,104,5004,-;{xid}\n" * 20)
    assert watch.sample() == {
        "xids": [f"4,103,5003,-;{xid} the bus."] + [f"4,104,5004,-;{xid}"] * 7
    }
    assert watch.sample() == {}


def test_a_kernel_log_this_user_may_not_read_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DDPTUI_KERNEL_LOG", str(tmp_path / "missing"))
    said = following.KernelLogWatch().sample()
    assert said == {"kernel_log": f"{tmp_path / 'missing'}: No such file or directory"}
