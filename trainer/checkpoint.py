"""Checkpoint files: written atomically by global rank 0, verified by a manifest on load.

``checkpoints/ckpt-000000200.pt`` holds the state; ``ckpt-000000200.json`` (the manifest) holds
step, epoch, world size, size and SHA-256 of the state file. A checkpoint exists only once its
manifest does, and both are renamed into place after an fsync, so a writer killed at any moment
leaves the previous checkpoints intact (and at worst a ``.tmp`` file, removed by the next save).
Writers of one directory take turns (a lock file): a rank's rescue may come while rank 0 saves.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from .dist import TrainerError

_PREFIX = "ckpt-"
_LOCK = ".lock"


@dataclass(frozen=True)
class Manifest:
    step: int
    epoch: int
    world_size: int
    sha256: str
    bytes: int
    file: str


@dataclass(frozen=True)
class Saved:
    path: Path
    bytes: int
    seconds: float


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(tmp: Path, final: Path) -> None:
    with tmp.open("rb+") as f:
        os.fsync(f.fileno())
    tmp.replace(final)


class CheckpointStore:
    def __init__(self, directory: Path, keep: int) -> None:
        self.directory = directory
        self.keep = keep

    def save(
        self,
        state: dict[str, Any],
        *,
        step: int,
        epoch: int,
        world_size: int,
        newer_only: bool = False,
    ) -> Saved | None:
        """Write ``state`` as the checkpoint of ``step``; with ``newer_only``, None instead
        when one at ``step`` or later is there already."""
        started = time.perf_counter()
        self.directory.mkdir(parents=True, exist_ok=True)
        with (self.directory / _LOCK).open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if newer_only and self.newest_step() >= step:
                return None
            for stale in self.directory.glob(f".{_PREFIX}*.tmp"):
                stale.unlink(missing_ok=True)
            name = f"{_PREFIX}{step:09d}"
            data = self.directory / f"{name}.pt"
            tmp = self.directory / f".{name}.pt.tmp"
            torch.save(state, tmp)
            manifest = Manifest(
                step, epoch, world_size, _sha256(tmp), tmp.stat().st_size, data.name
            )
            _write_durably(tmp, data)
            tmp_manifest = self.directory / f".{name}.json.tmp"
            tmp_manifest.write_text(json.dumps(asdict(manifest), indent=1) + "\n", encoding="utf-8")
            _write_durably(tmp_manifest, self.directory / f"{name}.json")
            _fsync_dir(self.directory)
            self._prune()
        return Saved(data, manifest.bytes, time.perf_counter() - started)

    def newest_step(self) -> int:
        """The step of the newest checkpoint by its name, verified or not; -1 when none."""
        for manifest in self.manifests():
            digits = manifest.stem[len(_PREFIX) :]
            if digits.isdigit():
                return int(digits)
        return -1

    def manifests(self) -> list[Path]:
        """Manifest files, newest step first."""
        return sorted(self.directory.glob(f"{_PREFIX}*.json"), reverse=True)

    def _prune(self) -> None:
        for manifest in self.manifests()[self.keep :]:
            # Manifest first: a half-pruned checkpoint must never look valid.
            manifest.unlink(missing_ok=True)
            manifest.with_suffix(".pt").unlink(missing_ok=True)

    def read_latest(self) -> tuple[bytes, Manifest, list[Skipped]] | None:
        """Newest checkpoint that verifies (its state file's bytes); None when there are none."""
        skipped: list[Skipped] = []
        for manifest_path in self.manifests():
            try:
                data, manifest = read_verified(manifest_path)
            except TrainerError as e:
                skipped.append(Skipped(str(manifest_path.with_suffix(".pt")), str(e)))
                continue
            return data, manifest, skipped
        if skipped:
            reasons = "; ".join(f"{s.path}: {s.reason}" for s in skipped)
            raise TrainerError(f"no valid checkpoint in {self.directory}: {reasons}")
        return None


def read_verified(manifest_path: Path) -> tuple[bytes, Manifest]:
    """The state file's bytes, once they match the manifest in name, size and checksum."""
    try:
        manifest = Manifest(**json.loads(manifest_path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as e:
        raise TrainerError(f"unreadable manifest {manifest_path}: {e}") from e
    if manifest_path.with_suffix(".pt").name != manifest.file:
        raise TrainerError(f"the manifest names {manifest.file}")
    try:
        data = manifest_path.with_suffix(".pt").read_bytes()
    except OSError as e:
        raise TrainerError(f"unreadable state file: {e}") from e
    if len(data) != manifest.bytes:
        raise TrainerError(f"{len(data)} bytes, the manifest says {manifest.bytes}")
    if hashlib.sha256(data).hexdigest() != manifest.sha256:
        raise TrainerError("checksum does not match the manifest")
    return data, manifest
