"""The run store on the head node: one directory per run under ``$XDG_STATE_HOME/ddptui/runs``.

Each run directory (:class:`~ddptui.layout.RunFiles`) holds ``run.toml`` (the
:class:`~ddptui.run.record.RunRecord`, replaced atomically on every change, under a lock)
and ``hosts.toml`` (the resolved hosts file the run was launched with, so every later command
reaches the same hosts), and what the run's supervisor keeps beside them. A copy of
``run.toml`` also goes to every host's run directory.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ddptui.atomic import make_dirs, open_file, write_atomic
from ddptui.errors import DdptuiError
from ddptui.layout import RunFiles
from ddptui.plan.launch import RUN_ID
from ddptui.run.record import RunRecord


class RunNotFound(DdptuiError):
    """No run by that id (or no run at all) in the store."""


class RunRecordUnreadable(DdptuiError):
    """A run record that is corrupt or half-written; the message names the file."""


def state_home() -> Path:
    """``$XDG_STATE_HOME/ddptui/runs`` (``~/.local/state/ddptui/runs`` when unset)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path("~/.local/state").expanduser())
    return Path(base) / "ddptui" / "runs"


def new_run_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    suffix = "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(4))
    return f"{stamp}-{suffix}"


class RunStore:
    """The runs under ``root`` (default :func:`state_home`).

    A run's supervisor is the only writer of its record once the record exists; every change
    goes through :meth:`update`, under the record's lock, and replaces the file atomically.
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else state_home()

    def directory(self, run_id: str) -> Path:
        return self.root / run_id

    def files(self, run_id: str) -> RunFiles:
        return RunFiles(self.directory(run_id))

    def create(self, record: RunRecord, hosts_toml: str) -> None:
        directory = self.directory(record.id)
        make_dirs(directory, exist_ok=False)
        files = RunFiles(directory)
        write_atomic(files.hosts, hosts_toml)
        write_atomic(files.record, record.to_toml())

    def load(self, run_id: str) -> RunRecord:
        """The record of ``run_id``: :class:`RunNotFound` when there is none,
        :class:`RunRecordUnreadable` (naming the file) when it cannot be read."""
        path = self.files(run_id).record
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise RunNotFound(f"no run {run_id!r} in {self.root}") from None
        except (OSError, UnicodeDecodeError) as error:
            raise RunRecordUnreadable(f"{path}: cannot be read: {error}") from None
        try:
            return RunRecord.from_toml(text)
        except ValueError as error:
            raise RunRecordUnreadable(
                f"{path}: {error}; left as it is (move it away to forget the run)"
            ) from None

    def update(self, run_id: str, change: Callable[[RunRecord], None]) -> RunRecord:
        """Load, change and save the record under its lock; the record as saved.

        A record that cannot be read is never overwritten: :class:`RunRecordUnreadable`.
        """
        with os.fdopen(open_file(self.files(run_id).lock, os.O_WRONLY), "wb") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            record = self.load(run_id)
            change(record)
            write_atomic(self.files(run_id).record, record.to_toml())
            return record

    def hosts_file(self, run_id: str) -> Path:
        return self.files(run_id).hosts

    def ids(self) -> list[str]:
        """Every run id in the store, oldest first (ids sort by start time)."""
        if not self.root.is_dir():
            return []
        return sorted(
            entry.name
            for entry in self.root.iterdir()
            if RUN_ID.fullmatch(entry.name) and (entry / "run.toml").is_file()
        )

    def resolve(self, run_id: str | None) -> RunRecord:
        """The run ``run_id`` names (a unique prefix will do), or the latest run for None."""
        ids = self.ids()
        if not ids:
            raise RunNotFound(f"no runs yet in {self.root}: start one with ddptui launch")
        if run_id is None:
            return self.load(ids[-1])
        matches = [candidate for candidate in ids if candidate.startswith(run_id)]
        if len(matches) != 1:
            what = "no run" if not matches else f"{len(matches)} runs"
            raise RunNotFound(f"{what} matching {run_id!r}; ddptui runs lists them")
        return self.load(matches[0])

    def catalogue(self) -> Catalogue:
        """Every run's record, oldest first, and the records that could not be read."""
        found = Catalogue()
        for run_id in self.ids():
            try:
                found.records.append(self.load(run_id))
            except RunRecordUnreadable as error:
                found.unreadable[run_id] = str(error)
            except RunNotFound:
                continue
        return found

    def records(self) -> Sequence[RunRecord]:
        return self.catalogue().records

    def changed_since(self, moment: float) -> list[RunRecord]:
        """The readable records written at or after ``moment`` (Unix seconds): a run started
        or resumed since is among them."""
        changed = []
        for run_id in self.ids():
            try:
                if self.files(run_id).record.stat().st_mtime < moment:
                    continue
                changed.append(self.load(run_id))
            except (OSError, RunNotFound, RunRecordUnreadable):
                continue
        return changed


@dataclass
class Catalogue:
    records: list[RunRecord] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)
    """Run id → why its record could not be read (named, never overwritten)."""
