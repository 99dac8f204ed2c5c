"""What a run uploads: the job's directory as the ranks will run it, or the bundled trainer.

The job's directory (``[job] dir``, by default the one holding the script) goes whole, less
what git would leave out (its ``.gitignore`` files), ``[job] exclude`` (the same patterns, from
the directory's top) and version-control and bytecode directories. Every file is named by its
SHA-256, so a host that already holds a file's content is not sent it again
(:mod:`ddptui.onhost.cache` keeps a cache of contents per workdir). Above ``[job] max_upload_mb``,
or :data:`MAX_FILES` files, nothing is sent: the error names the largest files, since a data
set or a checkpoint in the directory is the usual reason.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from ddptui.atomic import (
    PYCACHE,
    WORKDIR_DIR,
    WORKDIR_EXECUTABLE,
    WORKDIR_FILE,
    make_dirs,
    open_file,
)
from ddptui.config.model import JobConfig
from ddptui.errors import UsageError
from ddptui.run.code.gitignore import IgnoreRules
from ddptui.run.store import state_home

MIB = 1 << 20
MAX_FILES = 10_000
"""More files than a project has: a job directory that holds this many is most likely a home
directory or a data set, and walking and hashing it would take minutes."""
ALWAYS_LEFT_OUT = frozenset({".git", ".hg", ".svn", "__pycache__"})
"""Directories never uploaded, whatever the ignore files say."""
LARGEST_NAMED = 5
READ_CHUNK = 1 << 20


class CodeError(UsageError):
    """The code cannot be uploaded as it is; the message names the key to change."""


@dataclass(frozen=True)
class CodeFile:
    path: str
    """Where it lands, relative to the run's code directory (POSIX)."""
    source: Path
    size: int
    sha256: str
    executable: bool


@dataclass(frozen=True)
class CodeTree:
    """Every file a run uploads."""

    origin: Path
    """The directory the files come from (the job's, or the bundled trainer's parent)."""
    files: tuple[CodeFile, ...]

    @property
    def size(self) -> int:
        return sum(file.size for file in self.files)

    def manifest(self) -> dict[str, list[object]]:
        """Path → ``[sha256, executable]``, as the node agent stages it."""
        return {file.path: [file.sha256, file.executable] for file in self.files}

    def describe(self, listed: int = 20) -> list[str]:
        """The upload in a few lines: how much, from where, the largest files."""
        lines = [f"uploads {len(self.files)} file(s), {mib(self.size)} from {self.origin}"]
        largest = sorted(self.files, key=lambda file: (-file.size, file.path))[:listed]
        lines += (f"  {file.path}  {mib(file.size)}" for file in largest)
        if len(self.files) > listed:
            lines.append(f"  … and {len(self.files) - listed} smaller file(s)")
        return lines


def mib(size: int) -> str:
    return f"{size / MIB:.1f} MiB" if size >= MIB // 10 else f"{size:,} bytes"


def job_code(job: JobConfig) -> CodeTree:
    """What a run of ``job`` uploads; :class:`CodeError` when it cannot."""
    directory = job.code_dir
    if directory is None:
        return _bundled_trainer()
    if not directory.is_dir():
        what = "[job] dir" if job.dir is not None else "the directory of [job] script"
        raise CodeError(f"{what} {directory} is not a directory on this machine")
    if job.script is not None and not (directory / (job.script_target or "")).is_file():
        raise CodeError(f"[job] script {job.script} is not a file on this machine")
    return _tree(directory, job.exclude, limit=round(job.max_upload_mb * MIB), prefix="")


def _bundled_trainer() -> CodeTree:
    spec = find_spec("trainer")
    if spec is None or not spec.submodule_search_locations:
        raise CodeError("the bundled trainer package is not installed next to ddptui")
    package = Path(next(iter(spec.submodule_search_locations)))
    return _tree(package, (), limit=None, prefix="trainer/", origin=package.parent)


def _tree(
    directory: Path,
    exclude: tuple[str, ...],
    *,
    limit: int | None,
    prefix: str,
    origin: Path | None = None,
) -> CodeTree:
    found = list(_walk(directory, exclude))
    total = sum(size for _, _, size in found)
    if limit is not None and total > limit:
        largest = sorted(found, key=lambda item: -item[2])[:LARGEST_NAMED]
        named = ", ".join(f"{relative} ({mib(size)})" for relative, _, size in largest)
        raise CodeError(
            f"{directory} holds {mib(total)} to upload, over [job] max_upload_mb = "
            f"{limit / MIB:g}; the largest: {named}. Leave data and checkpoints out with "
            "[job] exclude (or .gitignore), or raise max_upload_mb"
        )
    files = tuple(
        CodeFile(prefix + relative, path, size, _sha256(path), _executable(path))
        for relative, path, size in found
    )
    return CodeTree(origin or directory, files)


def _walk(directory: Path, exclude: tuple[str, ...]) -> Iterator[tuple[str, Path, int]]:
    """Every file to upload under ``directory``: its relative path, its path here, its size."""
    rules = IgnoreRules()
    rules.add("", exclude)
    count = 0
    # The head's own run store, where a job's directory holds it (a script in the home
    # directory): its logs change while they are read, and no rank needs them.
    store = _identity(state_home())

    def failed(error: OSError) -> None:
        raise CodeError(f"cannot read {error.filename}: {error.strerror}")

    for top, dirnames, filenames in os.walk(directory, onerror=failed):
        here = Path(top)
        relative_top = here.relative_to(directory).as_posix()
        base = "" if relative_top == "." else relative_top
        if ".gitignore" in filenames:
            rules.add(base, _lines(here / ".gitignore"))
        # Directory links are not followed (os.walk's default): a link to a data set is the
        # usual one, and following links can loop.
        dirnames[:] = sorted(
            name
            for name in dirnames
            if name not in ALWAYS_LEFT_OUT
            and not (here / name).is_symlink()
            and not rules.ignored(_join(base, name), is_dir=True)
            and (store is None or _identity(here / name) != store)
        )
        for name in sorted(filenames):
            relative = _join(base, name)
            if rules.ignored(relative, is_dir=False):
                continue
            path = here / name
            try:
                info = path.stat()
            except OSError:
                continue  # a dangling link: nothing to send
            if not stat.S_ISREG(info.st_mode):
                continue
            count += 1
            if count > MAX_FILES:
                raise CodeError(
                    f"{directory} holds more than {MAX_FILES:,} files to upload: is it your "
                    "project's directory? Set [job] dir to it, or leave the rest out with "
                    "[job] exclude (or .gitignore)"
                )
            yield relative, path, info.st_size


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _join(base: str, name: str) -> str:
    return f"{base}/{name}" if base else name


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as error:
        raise CodeError(f"cannot read {path}: {error.strerror}") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(READ_CHUNK), b""):
                digest.update(chunk)
    except OSError as error:
        raise CodeError(f"cannot read {path}: {error.strerror}") from None
    return digest.hexdigest()


def _executable(path: Path) -> bool:
    return bool(path.stat().st_mode & stat.S_IXUSR)


def stage_tree(tree: CodeTree, directory: Path) -> None:
    """Copy every file of ``tree`` into ``directory`` (which must not exist), each checked
    against its SHA-256 as it is copied, then rename the whole into place: a reader of
    ``directory`` finds all of the code or none. For a workdir the nodes share (a Slurm run's),
    where the head stages the code itself."""
    partial = directory.with_name(f"{directory.name}.{os.getpid()}.partial")
    try:
        for file in tree.files:
            target = partial / file.path
            parent = target.parent / PYCACHE if target.suffix == ".py" else target.parent
            make_dirs(parent, WORKDIR_DIR)
            _copy_checked(file, target)
        partial.replace(directory)
    except OSError as error:
        raise CodeError(
            f"cannot stage the code in {directory}: {error.strerror or error}"
        ) from None
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)


def _copy_checked(file: CodeFile, target: Path) -> None:
    digest = hashlib.sha256()
    mode = WORKDIR_EXECUTABLE if file.executable else WORKDIR_FILE
    flags = os.O_WRONLY | os.O_EXCL
    with file.source.open("rb") as source, os.fdopen(open_file(target, flags, mode), "wb") as copy:
        for chunk in iter(lambda: source.read(READ_CHUNK), b""):
            digest.update(chunk)
            copy.write(chunk)
    if digest.hexdigest() != file.sha256:
        raise CodeError(f"{file.source} changed while it was staged; launch again")
