"""``workdir_unsafe``: a workdir another user on the host could write, replace or make first.

Its code is staged there and every rank imports the stack handler's ``sitecustomize.py`` from
there first, so the finding is an error, on ``ddptui check`` and inside a Slurm allocation.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from ddptui.check.run import check_nodes
from ddptui.config.model import ClusterConfig, Config, HostConfig, JobConfig, SlurmConfig
from ddptui.health import Code, Finding, HostCheck, Severity, evaluate
from ddptui.health.slurm import allocation_errors, in_allocation
from ddptui.health.workdir import workdir_findings
from ddptui.onhost.probe_workdir import private_group
from ddptui.probe.facts import NA, HostFacts, Maybe, PathEntry, WorkdirSafety
from ddptui.remote.commands import CommandResult
from ddptui.remote.status import Reach, Reachability
from ddptui.remote.transport import Command
from tests.helpers import recorded_torch, run_probe, write_package
from tests.remote.doubles import CommandsOnly

HOST = HostConfig("gpu-b", "10.0.0.2")
ALICE, BOB = 1000, 1001
PRIVATE = 1000
"""alice's own group; 100 below is a group others are in too."""
SHARED = 100
ROOT = PathEntry("/", 0, 0, 0o755, "directory")
HOME = PathEntry("/home", 0, 0, 0o755, "directory")
TMP = PathEntry("/tmp", 0, 0, 0o1777, "directory")


def directory(path: str, mode: int, uid: int = ALICE, gid: int = PRIVATE) -> PathEntry:
    return PathEntry(path, uid, gid, mode, "directory")


def link(path: str, uid: int = ALICE) -> PathEntry:
    return PathEntry(path, uid, uid, 0o777, "link")


def workdir(*entries: PathEntry, exists: bool = True, path: str = "") -> WorkdirSafety:
    """The walk to ``entries[-1]``: the workdir, or where it would be made."""
    return WorkdirSafety(
        path=path or entries[-1].path,
        uid=ALICE,
        private_gid=PRIVATE,
        exists=exists,
        entries=(ROOT, *entries),
        target=entries[-1],
    )


def findings(safety: Maybe[WorkdirSafety]) -> list[Finding]:
    return list(workdir_findings(HOST, HostFacts(workdir=safety)))


def finding(safety: WorkdirSafety) -> Finding:
    (found,) = findings(safety)
    assert (found.code, found.severity, found.host) == (
        Code.WORKDIR_UNSAFE,
        Severity.ERROR,
        "gpu-b",
    )
    return found


def commands(hint: str) -> list[list[str]]:
    return [shlex.split(command) for command in re.findall(r"`([^`]*)`", hint)]


RUNS = "/home/alice/runs"
ALICES = directory("/home/alice", 0o750)


# --- safe ------------------------------------------------------------------------------------

SAFE = {
    "a workdir of one's own under one's home": workdir(HOME, ALICES, directory(RUNS, 0o755)),
    "root's directories on the way": workdir(
        directory("/srv", 0o755, uid=0, gid=0), directory("/srv/alice", 0o700)
    ),
    "/tmp on the way (root's, sticky)": workdir(TMP, directory("/tmp/alice-runs", 0o700)),
    "a group-writable workdir whose group is alice's alone (umask 002)": workdir(
        HOME, ALICES, directory(RUNS, 0o775)
    ),
    "a missing workdir under one's home": workdir(HOME, ALICES, exists=False, path=RUNS),
    "a missing workdir under root's directory": workdir(
        directory("/data", 0o755, uid=0, gid=0), exists=False, path="/data/runs"
    ),
    "a link of one's own (a link's mode means nothing)": workdir(
        HOME,
        ALICES,
        link("/home/alice/runs"),
        directory("/scratch", 0o755, uid=0, gid=0),
        directory("/scratch/alice", 0o700),
    ),
}


@pytest.mark.parametrize("safety", SAFE.values(), ids=SAFE.keys())
def test_safe_workdirs_have_no_finding(safety: WorkdirSafety) -> None:
    assert findings(safety) == []


def test_an_older_probe_says_nothing_and_nothing_is_found() -> None:
    assert findings(NA) == []


def test_a_walk_that_stopped_short_is_judged_on_what_it_saw() -> None:
    partial = workdir(HOME, ALICES)
    assert findings(WorkdirSafety(partial.path, ALICE, PRIVATE, False, partial.entries, None)) == []
    shared = directory("/shared", 0o777, uid=0, gid=0)
    unsafe = WorkdirSafety("/shared/x", ALICE, PRIVATE, False, (ROOT, shared), None)
    assert "/shared is writable by" in finding(unsafe).message


# --- unsafe ----------------------------------------------------------------------------------


def test_a_workdir_owned_by_another_user() -> None:
    found = finding(workdir(HOME, ALICES, directory(RUNS, 0o755, uid=BOB)))
    assert "could change what the workdir /home/alice/runs holds" in found.message
    assert "sitecustomize.py" in found.message
    assert "/home/alice/runs (the workdir) belongs to another user (uid 1001)" in found.message
    assert 'workdir = "~/ddptui-runs"' in found.hint and "chown" in found.hint


@pytest.mark.parametrize(
    ("mode", "who"),
    [
        (0o775, "its group"),
        (0o757, "every other user"),
        (0o777, "its group and every other user"),
        (0o1777, "its group and every other user"),
    ],
)
def test_a_workdir_others_can_write_sticky_or_not(mode: int, who: str) -> None:
    found = finding(workdir(HOME, ALICES, directory(RUNS, mode, gid=SHARED)))
    assert f"/home/alice/runs (the workdir) is writable by {who} (mode {mode:04o})" in (
        found.message
    )
    assert commands(found.hint) == [["chmod", "go-w", RUNS]]
    assert (
        'or set workdir to a directory of your own under your home (workdir = "~/ddptui-runs")'
        in found.hint
    )


def test_an_ancestor_others_can_write_without_the_sticky_bit() -> None:
    shared = directory("/shared", 0o777, uid=0, gid=0)
    found = finding(workdir(shared, directory("/shared/alice", 0o700)))
    assert (
        "/shared is writable by its group and every other user without the sticky bit "
        "(mode 0777): any of them can rename what it holds"
    ) in found.message
    # Not alice's to change: the workdir belongs elsewhere.
    assert commands(found.hint) == []
    assert "under your home" in found.hint


def test_ones_own_group_writable_ancestor_is_chmod_away() -> None:
    found = finding(
        workdir(HOME, directory("/home/alice", 0o770, gid=SHARED), directory(RUNS, 0o700))
    )
    assert "/home/alice is writable by its group without the sticky bit" in found.message
    assert commands(found.hint) == [["chmod", "go-w", "/home/alice"]]


def test_an_ancestor_owned_by_another_user() -> None:
    bobs = directory("/home/bob", 0o755, uid=BOB, gid=BOB)
    found = finding(workdir(HOME, bobs, directory("/home/bob/alice-runs", 0o700)))
    assert "/home/bob belongs to another user (uid 1001)" in found.message


def test_a_link_on_the_way_owned_by_another_user() -> None:
    found = finding(workdir(TMP, link("/tmp/runs", uid=BOB), HOME, ALICES, directory(RUNS, 0o700)))
    assert "/tmp/runs is a link another user (uid 1001) owns, who may replace it" in found.message


def test_a_missing_workdir_in_tmp_can_be_made_first_by_anyone() -> None:
    found = finding(workdir(TMP, exists=False, path="/tmp/runs/alice"))
    assert (
        "/tmp (where the workdir would be made) is writable by its group and every other user "
        "(mode 1777): one of them can make the workdir first"
    ) in found.message
    assert commands(found.hint) == [["mkdir", "-p", "-m", "700", "/tmp/runs/alice"]]


def test_a_missing_workdir_in_a_directory_writable_without_the_sticky_bit() -> None:
    found = finding(workdir(HOME, directory("/home/alice", 0o777), exists=False, path=RUNS))
    assert "one of them can make the workdir first, or replace it" in found.message
    assert commands(found.hint) == [["chmod", "go-w", "/home/alice"]]


def test_a_missing_workdir_in_another_users_directory() -> None:
    bobs = directory("/home/bob", 0o755, uid=BOB, gid=BOB)
    found = finding(workdir(HOME, bobs, exists=False, path="/home/bob/runs"))
    assert "/home/bob (where the workdir would be made) belongs to another user" in found.message


def test_many_unsafe_parts_are_counted_past_three() -> None:
    parts = [directory(f"/d{n}", 0o777, uid=0, gid=0) for n in range(5)]
    found = finding(WorkdirSafety("/d4", ALICE, PRIVATE, True, (ROOT, *parts), parts[-1]))
    assert "; and 2 more" in found.message
    assert "/d2 is writable" in found.message and "/d3" not in found.message


def test_paths_the_host_reported_are_quoted_in_fixes_and_shown_on_one_line() -> None:
    hostile = "/home/alice/it's; touch /tmp/owned #\n\x1b[2J"
    found = finding(workdir(HOME, ALICES, directory(hostile, 0o777)))
    assert commands(found.hint) == [["chmod", "go-w", hostile]]
    assert "\n" not in found.message and "\x1b" not in found.message
    assert "\\x1b[2J" in found.message


# --- the directories ddptui makes in the workdir ---------------------------------------------

MADE_RUNS = f"{RUNS}/runs"


def with_made(*made: PathEntry) -> WorkdirSafety:
    """alice's own workdir under her home, holding ``made`` (directories ddptui makes there)."""
    safe = workdir(HOME, ALICES, directory(RUNS, 0o755))
    return replace(safe, entries=(*safe.entries, *made), made=made)


@pytest.mark.parametrize(
    "made",
    [directory(MADE_RUNS, 0o755), directory(MADE_RUNS, 0o775)],
    ids=["writable by alice alone", "group-writable, the group alice's alone (umask 002)"],
)
def test_what_ddptui_made_in_the_workdir_for_alice_alone_is_fine(made: PathEntry) -> None:
    assert findings(with_made(made)) == []


@pytest.mark.parametrize(
    ("mode", "who"),
    [
        (0o775, "its group"),
        (0o1775, "its group"),
        (0o757, "every other user"),
    ],
)
def test_a_directory_ddptui_makes_in_the_workdir_that_others_can_write(mode: int, who: str) -> None:
    found = finding(with_made(directory(MADE_RUNS, mode, gid=SHARED)))
    assert (
        f"{MADE_RUNS} (which ddptui makes in the workdir) is writable by {who} (mode {mode:04o})"
    ) in found.message
    # What it holds was made with the same umask.
    assert commands(found.hint) == [["chmod", "-R", "go-w", MADE_RUNS]]


def test_a_directory_ddptui_makes_in_the_workdir_owned_by_another_user() -> None:
    found = finding(with_made(directory(f"{RUNS}/code-cache", 0o755, uid=BOB, gid=BOB)))
    assert (
        f"{RUNS}/code-cache (which ddptui makes in the workdir) belongs to another user (uid 1001)"
    ) in found.message
    assert 'workdir = "~/ddptui-runs"' in found.hint


def test_the_workdir_and_what_ddptui_made_in_it_each_get_their_chmod() -> None:
    safety = with_made(directory(MADE_RUNS, 0o770, gid=SHARED))
    shared = directory(RUNS, 0o770, gid=SHARED)
    safety = replace(safety, entries=(ROOT, HOME, ALICES, shared, *safety.made), target=shared)
    assert commands(finding(safety).hint) == [
        ["chmod", "go-w", RUNS],
        ["chmod", "-R", "go-w", MADE_RUNS],
    ]


def test_evaluate_says_it_among_the_hosts_errors() -> None:
    config = Config(Path("hosts.toml"), ClusterConfig(), (HOST,), JobConfig())
    facts = HostFacts(workdir=workdir(TMP, exists=False, path="/tmp/runs"))
    found = evaluate(config, [HostCheck(HOST, Reachability(Reach.OK), facts)])
    assert [f.severity for f in found if f.code is Code.WORKDIR_UNSAFE] == [Severity.ERROR]


# --- the real probe, on this machine --------------------------------------------------------


def _a_shared_group() -> int:
    """A group this user may give a directory that is not this user's own private group."""
    private = private_group()
    candidates = [os.getegid(), *os.getgroups(), *([54321] if os.geteuid() == 0 else [])]
    shared = [gid for gid in candidates if gid != private]
    if not shared:
        pytest.skip("this user is in no group but a private one")
    return shared[0]


def _probed_workdir(tmp_path: Path, mode: int, gid: int | None = None) -> HostFacts:
    work = tmp_path / "work"
    work.mkdir()
    if gid is not None:
        os.chown(work, -1, gid)
    work.chmod(mode)
    facts, _ = run_probe(tmp_path, python_path={"torch/__init__.py": recorded_torch()})
    return facts


def test_the_probe_finds_a_group_writable_workdir(tmp_path: Path) -> None:
    facts = _probed_workdir(tmp_path, 0o770, _a_shared_group())
    assert isinstance(facts.workdir, WorkdirSafety)
    found = finding(facts.workdir)
    work = str(tmp_path / "work")
    assert f"{work} (the workdir) is writable by its group (mode 0770)" in found.message
    assert commands(found.hint) == [["chmod", "go-w", work]]


def test_the_probe_finds_nothing_wrong_with_a_private_workdir(tmp_path: Path) -> None:
    facts = _probed_workdir(tmp_path, 0o700)
    assert isinstance(facts.workdir, WorkdirSafety)
    assert findings(facts.workdir) == []


@pytest.mark.parametrize("name", ["runs", "code-cache"])
def test_the_probe_finds_a_group_writable_directory_ddptui_makes_in_a_private_workdir(
    tmp_path: Path, name: str
) -> None:
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    made = work / name
    made.mkdir()
    os.chown(made, -1, _a_shared_group())
    made.chmod(0o775)
    facts, _ = run_probe(tmp_path, python_path={"torch/__init__.py": recorded_torch()})
    assert isinstance(facts.workdir, WorkdirSafety)
    found = finding(facts.workdir)
    assert f"{made} (which ddptui makes in the workdir) is writable by its group" in found.message
    assert commands(found.hint) == [["chmod", "-R", "go-w", str(made)]]


class LocalNodes(CommandsOnly):
    """The transport a Slurm allocation's check uses, with this machine as its one node."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def python(self, host: HostConfig, *args: str) -> list[str]:
        return [sys.executable, *args]

    async def _execute(self, host: HostConfig, command: Command) -> CommandResult:
        done = await asyncio.to_thread(
            subprocess.run,
            command.argv,
            input=command.input,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=command.timeout,
        )
        return CommandResult(done.returncode, done.stdout, done.stderr)


def test_the_check_inside_a_slurm_allocation_stops_on_it(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    work.chmod(0o777)
    fakes = write_package(tmp_path / "site", {"torch/__init__.py": recorded_torch()})
    node = HostConfig("node07", "127.0.0.1", workdir=str(work))
    slurm = SlurmConfig(nodes=1)
    config = Config(Path("hosts.toml"), ClusterConfig(), (node,), JobConfig(), slurm=slurm)
    nodes = LocalNodes(dict(os.environ, PYTHONPATH=str(fakes)))
    _, found = asyncio.run(check_nodes(config, nodes))
    (unsafe,) = [f for f in in_allocation(found) if f.code is Code.WORKDIR_UNSAFE]
    assert unsafe.severity is Severity.ERROR and unsafe.host == "node07"
    said = allocation_errors(slurm, in_allocation(found))
    assert (
        said is not None
        and f"node07: another user on node07 could change what the workdir {work}" in said
    )
