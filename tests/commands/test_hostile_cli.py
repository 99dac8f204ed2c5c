"""``ddptui check`` and ``ddptui trust`` against hostile hosts, run as the user runs them.

Each test starts one misbehaving in-process SSH server (:mod:`tests.helpers.hostile_server`) and
runs the real command in a subprocess under an address-space limit, then holds it to the
same bar: an exit code of 0, 1 or 2, a word about that host, no escape byte and no
traceback in what it printed, a peak resident size under 200 MiB, and an end within the
configured timeouts.
"""

from __future__ import annotations

import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from tests.helpers import Behaviour, HostileSshServer

CONNECT_TIMEOUT_S = 3.0
ADDRESS_SPACE_LIMIT = 1024 * 1024 * 1024
"""A runaway command dies of MemoryError at 1 GiB instead of taking the machine down."""
PEAK_RSS_LIMIT = 200 * 1024 * 1024
ESC_LIKE = (b"\x1b", b"\xc2\x9b", b"\xc2\x9d", b"\x07")
"""ESC, CSI and OSC (C1, in UTF-8) and BEL: none may reach the terminal from a host."""

TITLE = "\x1b]0;owned\x07"
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4K\x07"
CLEAR = "\x1b[2J\x9b2J"


@dataclass
class Outcome:
    returncode: int
    stdout: bytes
    stderr: bytes
    seconds: float
    peak_rss: int

    @property
    def text(self) -> str:
        """Both streams, with runs of whitespace as one space: rich wraps long lines."""
        return " ".join((self.stdout + self.stderr).decode("utf-8").split())


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))


MEASURED_CHILD = """
import os, sys
report, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    os.execv(argv[0], argv)
_, status, usage = os.wait4(pid, 0)
with open(report, "w") as out:
    out.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""
"""Runs the command as its own child and reports its exit code and peak RSS. Linux carries a
process's peak RSS across fork and exec, so measured straight from pytest the command would
inherit pytest's own (hundreds of MiB after the torch tests); from this small parent it
inherits a few MiB."""


def ddptui(home: Path, *args: str, timeout: float = 60.0) -> Outcome:
    """Run ``python -m ddptui ARGS`` with ``home`` as HOME; its exit code and own peak RSS."""
    env = {key: value for key, value in os.environ.items() if key != "SSH_AUTH_SOCK"}
    env.update(HOME=str(home), COLUMNS="120")
    began = time.monotonic()
    with (
        tempfile.TemporaryDirectory() as scratch,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        report = Path(scratch) / "report"
        command = [sys.executable, "-m", "ddptui", *args]
        proc = subprocess.Popen(
            [sys.executable, "-c", MEASURED_CHILD, str(report), *command],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=env,
            preexec_fn=_limit_address_space,
            start_new_session=True,
        )
        killer = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))
        killer.start()
        proc.wait()
        killer.cancel()
        seconds = time.monotonic() - began
        if seconds >= timeout:
            pytest.fail(f"ddptui {' '.join(args)} still ran after {timeout:g} s")
        returncode, maxrss_kib = (int(field) for field in report.read_text().split())
        out.seek(0)
        err.seek(0)
        outcome = Outcome(returncode, out.read(), err.read(), seconds, maxrss_kib * 1024)
    return outcome


def assert_well_behaved(outcome: Outcome, host: str = "hostile") -> None:
    printed = outcome.stdout + outcome.stderr
    assert outcome.returncode in (0, 1, 2), outcome.text
    assert not [seq for seq in ESC_LIKE if seq in printed], outcome.text
    assert "Traceback" not in outcome.text, outcome.text
    assert host in outcome.text
    assert outcome.peak_rss < PEAK_RSS_LIMIT, f"peak RSS {outcome.peak_rss / 2**20:.0f} MiB"


def write_hosts(path: Path, server: HostileSshServer, known_hosts: Path) -> Path:
    document = {
        "cluster": {
            "user": "hostile-user",
            "identity_file": str(server.client_key),
            "known_hosts": str(known_hosts),
            "connect_timeout": CONNECT_TIMEOUT_S,
        },
        "hosts": [{"name": "hostile", "address": server.host, "port": server.port}],
        "job": {"nproc_per_node": 1},
    }
    path.write_text(tomli_w.dumps(document))
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty HOME: no ~/.ssh/config or known_hosts of the machine's user leaks in."""
    path = tmp_path / "home"
    path.mkdir()
    return path


def serve(tmp_path: Path, behaviour: Behaviour, **kwargs: Any) -> Iterator[HostileSshServer]:
    with HostileSshServer.start(tmp_path / "server", behaviour, **kwargs) as server:
        yield server


def trusted_hosts(tmp_path: Path, server: HostileSshServer) -> Path:
    return write_hosts(tmp_path / "hosts.toml", server, server.known_hosts)


def probe_document(**changes: Any) -> dict[str, Any]:
    """A well-formed probe document of a plain CPU host; ``changes`` replace sections."""
    doc: dict[str, Any] = {
        "probe_version": 1,
        "host": {"hostname": "h", "fqdn": "h", "addresses": ["192.0.2.7"]},
        "interfaces": {"items": [{"name": "eth0", "ipv4": [
            {"address": "192.0.2.7", "prefixlen": 24}]}]},
        "python": {"version": "3.11.7", "executable": "/usr/bin/python3", "is_conda": False},
        "torch": {"status": "ok", "version": "2.13.0", "cuda": None, "cuda_available": False,
                  "device_count": 0, "nccl": None, "gloo_available": True},
        "gpus": {"source": "none", "devices": [], "problem": ""},
        "disk": {"path": "/w", "checked_path": "/w", "free_bytes": 10**12, "total_bytes": 10**12},
        "system": {"cpu_count": 2, "memory_total_bytes": 2**33},
        "packages": {"pip": {"torch": "2.13.0"}, "conda": None},
        "port": {"port": 29500, "in_use": False},
        "master": {"name": "127.0.0.1", "addresses": ["127.0.0.1"]},
        "time": time.time(),
    }  # fmt: skip
    doc.update(changes)
    return doc


def strict_json(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


# --- a reason full of escapes, before authentication -------------------------------------


@pytest.fixture
def disconnecting(tmp_path: Path) -> Iterator[HostileSshServer]:
    yield from serve(tmp_path, Behaviour.DISCONNECT, reason=f"go away {TITLE}{CLIPBOARD}{CLEAR}")


def test_check_shows_a_disconnect_reason_with_its_escapes_visible(
    disconnecting: HostileSshServer, tmp_path: Path, home: Path
) -> None:
    outcome = ddptui(home, "check", str(trusted_hosts(tmp_path, disconnecting)))
    assert_well_behaved(outcome)
    assert outcome.returncode == 1
    assert "host_unreachable" in outcome.text
    assert "go away \\x1b]0;owned\\x07\\x1b]52;c;" in outcome.text
    assert outcome.seconds < 4 * CONNECT_TIMEOUT_S


def test_trust_shows_a_disconnect_reason_with_its_escapes_visible(
    disconnecting: HostileSshServer, tmp_path: Path, home: Path
) -> None:
    hosts = write_hosts(tmp_path / "hosts.toml", disconnecting, tmp_path / "empty_known_hosts")
    outcome = ddptui(home, "trust", str(hosts), "--yes")
    assert_well_behaved(outcome)
    assert outcome.returncode == 1
    assert "unreachable" in outcome.text and "go away \\x1b]0;owned" in outcome.text
    assert not (tmp_path / "empty_known_hosts").exists()


# --- a crafted probe document -------------------------------------------------------------

HOSTILE_FACTS = probe_document(
    host={
        "hostname": f"[/]{TITLE}",
        "fqdn": "[link=https://evil.example]click[/link]",
        "addresses": ["127.0.1.1"],
        "resolve_error": CLIPBOARD,
    },
    interfaces={"items": [{"name": f"[bold]e{CLEAR}", "ipv4": []}, {"name": "[/]", "ipv4": []}]},
    python={"version": f"3.11{TITLE}", "executable": "/x/\ud800/python", "is_conda": False},
    torch={"status": "error", "detail": f"[red]boom{CLIPBOARD}"},
    gpus={"source": "nvidia-smi", "driver_version": "[/]", "devices": [
        {"index": 0, "name": f"GPU{CLEAR}", "memory_total_mib": 1, "memory_used_mib": 1,
         "processes": [{"pid": 7, "name": f"[link=x]{TITLE}", "used_memory_mib": 1}]}]},
    disk={"path": f"/w{TITLE}", "checked_path": "[/]", "free_bytes": 1, "total_bytes": 2},
    time=math.nan,
)  # fmt: skip


@pytest.fixture
def crafted(tmp_path: Path) -> Iterator[HostileSshServer]:
    answer = json.dumps(HOSTILE_FACTS).encode() + b"\n"  # NaN as JSON's NaN literal
    yield from serve(tmp_path, Behaviour.ANSWER, answer=answer)


def test_check_prints_hostile_facts_literally(
    crafted: HostileSshServer, tmp_path: Path, home: Path
) -> None:
    outcome = ddptui(home, "check", str(trusted_hosts(tmp_path, crafted)))
    assert_well_behaved(outcome)
    assert outcome.returncode == 1
    # Markup shown as text, not interpreted (and no MarkupError): the hostname's "[/]" and
    # the escapes after it, the interface name's "[bold]", the torch error's "[red]".
    assert "[/]\\x1b]0;owned\\x07" in outcome.text
    assert "[red]boom\\x1b]52;c;" in outcome.text
    assert "torch_broken" in outcome.text
    assert outcome.seconds < 4 * CONNECT_TIMEOUT_S


def test_check_json_is_strict_json_with_the_host_values_intact(
    crafted: HostileSshServer, tmp_path: Path, home: Path
) -> None:
    outcome = ddptui(home, "check", "--json", str(trusted_hosts(tmp_path, crafted)))
    assert_well_behaved(outcome)
    document = strict_json(outcome.stdout.decode())
    (host,) = document["hosts"]
    # JSON escapes control characters itself; scripts get the host's exact words.
    assert host["facts"]["hostname"] == f"[/]{TITLE}"
    assert host["facts"]["time"] is None  # NaN is not a time
    assert host["clock_offset_s"] is None


@pytest.fixture
def deep(tmp_path: Path) -> Iterator[HostileSshServer]:
    yield from serve(tmp_path, Behaviour.ANSWER, answer=b"[" * 100_000 + b"\n")


def test_check_reports_a_deeply_nested_answer_as_that_hosts_probe_failure(
    deep: HostileSshServer, tmp_path: Path, home: Path
) -> None:
    outcome = ddptui(home, "check", str(trusted_hosts(tmp_path, deep)))
    assert_well_behaved(outcome)
    assert outcome.returncode == 1
    assert "probe_failed" in outcome.text


# --- a flood ------------------------------------------------------------------------------


@pytest.fixture
def flooding(tmp_path: Path) -> Iterator[HostileSshServer]:
    yield from serve(tmp_path, Behaviour.FLOOD)


def test_check_hangs_up_on_a_flood_and_says_so(
    flooding: HostileSshServer, tmp_path: Path, home: Path
) -> None:
    outcome = ddptui(home, "check", str(trusted_hosts(tmp_path, flooding)))
    assert_well_behaved(outcome)
    assert outcome.returncode == 1
    assert "probe_failed" in outcome.text
    assert "sent more than 8 MiB on stdout" in outcome.text
    # Hung up on: the server wrote about the cap plus what was in flight, not on and on.
    assert 8 * 2**20 <= flooding.flooded < 64 * 2**20
    assert outcome.seconds < 4 * CONNECT_TIMEOUT_S


def test_trust_is_unaffected_by_a_flooding_host(
    flooding: HostileSshServer, tmp_path: Path, home: Path
) -> None:
    hosts = write_hosts(tmp_path / "hosts.toml", flooding, tmp_path / "known_hosts")
    outcome = ddptui(home, "trust", str(hosts), "--yes")
    assert_well_behaved(outcome)
    assert outcome.returncode == 0 and "new" in outcome.text


# --- a server that swallows channel opens -------------------------------------------------


@pytest.fixture
def swallowing(tmp_path: Path) -> Iterator[HostileSshServer]:
    yield from serve(tmp_path, Behaviour.SWALLOW)


def test_check_gives_up_on_a_host_that_never_opens_a_session(
    swallowing: HostileSshServer, tmp_path: Path, home: Path
) -> None:
    outcome = ddptui(home, "check", str(trusted_hosts(tmp_path, swallowing)))
    assert_well_behaved(outcome)
    assert outcome.returncode == 1
    assert swallowing.channel_opens >= 1
    assert f"did not open a session within {CONNECT_TIMEOUT_S:g} s" in outcome.text
    assert outcome.seconds < 4 * CONNECT_TIMEOUT_S


def test_trust_is_unaffected_by_a_host_that_never_opens_a_session(
    swallowing: HostileSshServer, tmp_path: Path, home: Path
) -> None:
    hosts = write_hosts(tmp_path / "hosts.toml", swallowing, tmp_path / "known_hosts")
    outcome = ddptui(home, "trust", str(hosts), "--yes")
    assert_well_behaved(outcome)
    assert outcome.returncode == 0
    assert outcome.seconds < 4 * CONNECT_TIMEOUT_S
