"""What a run uploads (the job's directory, as git and ``exclude`` leave it) and how: through the
node agent over plain SSH sessions, only the contents a host's cache lacks, verified."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from ddptui.config.model import HostConfig, JobConfig
from ddptui.layout import code_dir
from ddptui.remote.connection import RemoteCluster
from ddptui.remote.transport import Transport
from ddptui.run.agent import call as agent_call
from ddptui.run.agent.call import NodeError
from ddptui.run.code import contents as code
from ddptui.run.code import upload as code_upload
from ddptui.run.code.contents import CodeError, job_code
from tests.remote.hosts import local_host
from tests.testbed import LocalSshServer


def _project(root: Path) -> Path:
    files = {
        "multinode.py": "import datautils\n",
        "datautils.py": "X = 1\n",
        "configs/base.yaml": "lr: 0.1\n",
        "pkg/__init__.py": "",
        "pkg/__pycache__/mod.cpython-311.pyc": "bytecode",
        ".git/HEAD": "ref: refs/heads/main\n",
        "data/train.bin": "d" * 1000,
        "runs/old/log.txt": "old",
        "notes/keep.md": "keep",
        "notes/drop.tmp": "drop",
        ".gitignore": "data/\n*.tmp\n",
        "notes/.gitignore": "!drop.tmp\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "big-link").symlink_to(root / "data", target_is_directory=True)
    return root


def test_the_scripts_directory_goes_less_what_git_and_exclude_leave_out(tmp_path: Path) -> None:
    root = _project(tmp_path / "ddp-series")
    job = JobConfig(script=root / "multinode.py", exclude=("runs/",))
    tree = job_code(job)
    assert job.script_target == "multinode.py" and tree.origin == root
    assert sorted(file.path for file in tree.files) == [
        ".gitignore",
        "configs/base.yaml",
        "datautils.py",
        "multinode.py",
        "notes/.gitignore",
        # A deeper .gitignore takes it back, as git does.
        "notes/drop.tmp",
        "notes/keep.md",
        "pkg/__init__.py",
    ]
    datautils = next(file for file in tree.files if file.path == "datautils.py")
    assert datautils.sha256 == hashlib.sha256(b"X = 1\n").hexdigest() and datautils.size == 6


def test_a_script_in_a_subdirectory_of_dir_runs_from_there(tmp_path: Path) -> None:
    root = _project(tmp_path / "repo" / "ddp-series").parent
    job = JobConfig(script=root / "ddp-series" / "multinode.py", dir=root)
    assert job.script_target == "ddp-series/multinode.py"
    assert "ddp-series/datautils.py" in {file.path for file in job_code(job).files}
    package = JobConfig(script=root / "ddp-series")
    assert package.code_dir == root / "ddp-series" and package.script_target == "__main__.py"


def test_over_the_size_cap_nothing_is_sent_and_the_largest_files_are_named(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path / "p")
    (root / "weights.pt").write_bytes(b"w" * 300_000)
    with pytest.raises(CodeError) as refused:
        job_code(JobConfig(script=root / "multinode.py", max_upload_mb=0.1))
    said = str(refused.value)
    assert "holds 0.3 MiB to upload, over [job] max_upload_mb = 0.1" in said
    assert "the largest: weights.pt (0.3 MiB), " in said
    assert "[job] exclude" in said


def test_a_home_directory_is_refused_by_its_file_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(code, "MAX_FILES", 5)
    root = _project(tmp_path / "home")
    with pytest.raises(CodeError, match="more than 5 files to upload: is it your project's"):
        job_code(JobConfig(script=root / "multinode.py"))


def test_the_head_s_run_store_inside_the_project_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _project(tmp_path / "home")
    monkeypatch.setenv("XDG_STATE_HOME", str(root / ".local" / "state"))
    store = root / ".local" / "state" / "ddptui" / "runs" / "20261202-000000-abcd"
    store.mkdir(parents=True)
    (store / "supervisor.log").write_text("written while the upload reads it\n")
    (root / ".local" / "state" / "notes.txt").write_text("theirs\n")
    paths = {file.path for file in job_code(JobConfig(script=root / "multinode.py")).files}
    assert ".local/state/notes.txt" in paths
    assert not any("ddptui/runs" in path for path in paths)


def test_a_missing_script_or_directory_says_which(tmp_path: Path) -> None:
    with pytest.raises(CodeError, match="is not a file on this machine"):
        job_code(JobConfig(script=tmp_path / "train.py"))
    with pytest.raises(CodeError, match=r"\[job\] dir .* is not a directory"):
        job_code(JobConfig(module="pkg.train", dir=tmp_path / "gone"))


def test_the_bundled_trainer_goes_as_its_package() -> None:
    tree = job_code(JobConfig())
    paths = {file.path for file in tree.files}
    assert "trainer/__main__.py" in paths and all(p.startswith("trainer/") for p in paths)
    assert not any("__pycache__" in p for p in paths)


RECORD = 'id = "20990101-000000-code"\n'


def _cluster(server: LocalSshServer) -> tuple[HostConfig, str, str]:
    host = local_host(server)
    workdir = server.home / "work"
    return host, str(workdir / "code-cache"), str(workdir / "runs" / "r1" / "node0")


def test_a_relaunch_sends_only_what_changed_and_stages_verified_code(
    local_ssh_server: LocalSshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pieces of 64 KiB: a 200 KiB file goes in four calls, as a large file would in 8 MiB ones.
    monkeypatch.setattr(code_upload, "UPLOAD_PIECE", 64 * 1024)
    root = _project(tmp_path / "p")
    (root / "weights.pt").write_bytes(bytes(range(256)) * 800)
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    job = JobConfig(script=root / "multinode.py")
    host, cache, run_dir = _cluster(local_ssh_server)

    calls: list[str] = []
    agent = agent_call.agent

    async def counted(remote: Transport, host: HostConfig, *args: str, **kwargs: Any) -> Any:
        calls.append(args[0])
        return await agent(remote, host, *args, **kwargs)

    monkeypatch.setattr(code_upload, "agent", counted)

    async def scenario() -> list[int]:
        sent = []
        async with RemoteCluster([host], connect_timeout=5) as remote:
            tree = job_code(job)
            first = await code_upload.send(remote, host, cache, run_dir, tree, RECORD)
            assert first[1] is False
            sent.append(first[0])
            # A relaunch of the same code: one call to the host, nothing sent.
            calls.clear()
            again = run_dir.replace("r1", "r0")
            assert await code_upload.send(remote, host, cache, again, job_code(job), RECORD) == (
                0,
                False,
            )
            assert calls == ["stage"]
            sent.append(0)
            (root / "datautils.py").write_text("X = 2\n")
            changed = job_code(job)
            second = run_dir.replace("r1", "r2")
            changed_sent, shared = await code_upload.send(
                remote, host, cache, second, changed, RECORD
            )
            assert not shared
            sent.append(changed_sent)
            # A host that shares the workdir finds the same code there and is done; other code
            # is never put in its place.
            assert await code_upload.send(remote, host, cache, second, changed, RECORD) == (
                0,
                True,
            )
            with pytest.raises(NodeError, match="exists already, with other code"):
                await code_upload.send(remote, host, cache, second, tree, RECORD)
        return sent

    sent = asyncio.run(scenario())
    total = sum(file.size for file in job_code(job).files)
    assert sent == [total, 0, 6]
    code = Path(code_dir(run_dir))
    assert (code / "weights.pt").read_bytes() == (root / "weights.pt").read_bytes()
    assert (code / "datautils.py").read_text() == "X = 1\n"
    assert Path(code_dir(run_dir.replace("r1", "r2")), "datautils.py").read_text() == "X = 2\n"
    assert (code / "run.sh").stat().st_mode & 0o111
    assert not (code / "data").exists()
    assert sorted(p.name for p in code.parent.iterdir()) == ["code", "node0"]
    assert Path(run_dir, "run.toml").read_text() == RECORD


def test_a_damaged_upload_or_cache_is_refused_and_forgotten(
    local_ssh_server: LocalSshServer, tmp_path: Path
) -> None:
    root = _project(tmp_path / "p")
    job = JobConfig(script=root / "multinode.py")
    host, cache, run_dir = _cluster(local_ssh_server)
    tree = job_code(job)
    digest = next(file.sha256 for file in tree.files if file.path == "datautils.py")

    async def scenario() -> None:
        async with RemoteCluster([host], connect_timeout=5) as remote:
            # What an upload cut short left: longer than the content and wrong.
            Path(cache).mkdir(parents=True)
            Path(cache, digest + ".part").write_bytes(b"garbage" * 100)
            await code_upload.send(remote, host, cache, run_dir, tree, RECORD)
            assert Path(cache, digest).read_bytes() == b"X = 1\n"
            Path(cache, digest).write_bytes(b"X = 666\n")
            with pytest.raises(NodeError, match=r"datautils\.py: the cached copy is damaged"):
                await code_upload.send(remote, host, cache, again, tree, RECORD)
            assert not Path(code_dir(again)).exists()
            # Forgotten, so the next launch sends it again.
            assert await code_upload.send(remote, host, cache, again, tree, RECORD) == (6, False)

    again = run_dir.replace("r1", "r2")
    asyncio.run(scenario())
    assert Path(code_dir(again), "datautils.py").read_text() == "X = 1\n"
    assert sorted(p.name for p in Path(code_dir(again)).parent.iterdir()) == ["code", "node0"]


def test_a_file_that_changes_while_it_is_uploaded_is_named(
    local_ssh_server: LocalSshServer, tmp_path: Path
) -> None:
    root = _project(tmp_path / "p")
    tree = job_code(JobConfig(script=root / "multinode.py"))
    # A log the script's directory holds, written to between the listing and the upload.
    (root / "datautils.py").write_text("X = 1\nX = 2\n")
    host, cache, run_dir = _cluster(local_ssh_server)

    async def upload() -> None:
        async with RemoteCluster([host], connect_timeout=5) as remote:
            await code_upload.send(remote, host, cache, run_dir, tree, RECORD)

    with pytest.raises(NodeError, match=r"datautils\.py changed while it was uploaded"):
        asyncio.run(upload())


def test_staging_on_a_shared_workdir_gives_its_own_modes_whatever_the_umask(
    tmp_path: Path,
) -> None:
    """With 002 and a group shared with others, one of them could replace the staged code, or
    put a .pyc of theirs in a ``__pycache__`` the first import makes."""
    root = _project(tmp_path / "project")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    tree = job_code(JobConfig(script=root / "multinode.py", exclude=("runs/",)))
    staged = tmp_path / "runs" / "r" / "code"
    old = os.umask(0o002)
    try:
        code.stage_tree(tree, staged)
    finally:
        os.umask(old)
    modes = {
        path.relative_to(staged).as_posix(): path.stat().st_mode & 0o777
        for path in staged.rglob("*")
    }
    assert modes.pop("run.sh") == 0o755
    assert modes.pop("__pycache__") == 0o755
    assert modes == {path: 0o755 if (staged / path).is_dir() else 0o644 for path in modes}, (
        "writable by others, or made with the umask"
    )
    assert (tmp_path / "runs" / "r").stat().st_mode & 0o777 == 0o755


def test_staging_on_a_shared_workdir_puts_every_file_in_place_or_none(tmp_path: Path) -> None:
    root = _project(tmp_path / "project")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    tree = job_code(JobConfig(script=root / "multinode.py", exclude=("runs/",)))
    staged = tmp_path / "runs" / "r" / "code"
    staged.parent.mkdir(parents=True)
    code.stage_tree(tree, staged)
    for file in tree.files:
        assert (staged / file.path).read_bytes() == file.source.read_bytes()
    assert (staged / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (staged / "multinode.py").stat().st_mode & 0o777 == 0o644
    # A file edited between the listing and the copy: nothing is staged, nothing is left.
    (root / "multinode.py").write_text("print('edited')\n")
    again = tmp_path / "runs" / "s" / "code"
    again.parent.mkdir(parents=True)
    with pytest.raises(CodeError, match=r"multinode\.py changed while it was staged"):
        code.stage_tree(tree, again)
    assert list(again.parent.iterdir()) == []
