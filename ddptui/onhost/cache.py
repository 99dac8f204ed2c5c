"""The host's cache of code contents (by SHA-256) and the code directory staged from it; files
written and listed for the head."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import stat
import time
from pathlib import Path
from typing import Any

from ddptui.onhost.common import CACHE_DAYS, READ_CHUNK, emit, write_atomic


def sha256_of(path: Path, copy_to: Path | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        if copy_to is None:
            for chunk in iter(lambda: handle.read(READ_CHUNK), b""):
                digest.update(chunk)
        else:
            with copy_to.open("wb") as out:
                for chunk in iter(lambda: handle.read(READ_CHUNK), b""):
                    digest.update(chunk)
                    out.write(chunk)
    return digest.hexdigest()


def have(cache: Path, sent: Any) -> int:
    missing = []
    now = time.time()
    for digest in sent:
        path = cache / str(digest)
        try:
            os.utime(path, (now, now))
        except OSError:
            missing.append(digest)
    # Once per staging, after this one's contents were touched: not once per piece sent.
    if cache.is_dir():
        prune(cache)
    emit({"missing": missing})
    return 0


def put(cache: Path, sent: Any) -> int:
    cache.mkdir(parents=True, exist_ok=True)
    for digest, offset, data, size in sent:
        part = cache / (str(digest) + ".part")
        handle = os.open(str(part), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.pwrite(handle, base64.b64decode(data), int(offset))
            if size is not None:
                # What an upload that broke off left beyond the end is not the content's.
                os.ftruncate(handle, int(size))
        finally:
            os.close(handle)
        if size is None:
            continue
        final = cache / str(digest)
        try:
            good = sha256_of(part) == digest
        except FileNotFoundError:
            # A host sharing this cache finished the same content first.
            good = final.exists()
        else:
            if good:
                part.replace(final)
        if not good:
            part.unlink()
            emit({"error": f"content {digest[:12]} arrived damaged: checksum mismatch"})
            return 1
    emit({"stored": len(sent)})
    return 0


def prune(cache: Path) -> None:
    horizon = time.time() - CACHE_DAYS * 86400
    for entry in cache.iterdir():
        try:
            if entry.stat().st_mtime < horizon:
                entry.unlink()
        except OSError:
            continue


def stage(cache: Path, code_dir: Path, manifest: Any) -> int:
    if code_dir.exists():
        return staged_already(code_dir, manifest)
    stage_dir = code_dir.with_name(".code-" + os.urandom(4).hex())
    placed = False
    try:
        for relative, (digest, executable) in sorted(manifest.items()):
            target = stage_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                copied = sha256_of(cache / digest, copy_to=target)
            except OSError as error:
                emit({"error": f"{relative}: {error}"})
                return 1
            if copied != digest:
                emit({"error": f"{relative}: the cached copy is damaged (checksum mismatch)"})
                (cache / digest).unlink()
                return 1
            if executable:
                target.chmod(0o755)
        try:
            stage_dir.rename(code_dir)
        except OSError:
            if not code_dir.exists():
                raise
            # A host sharing this workdir renamed its copy into place first.
            return staged_already(code_dir, manifest)
        placed = True
    finally:
        if not placed:
            shutil.rmtree(str(stage_dir), ignore_errors=True)
    emit({"staged": len(manifest)})
    return 0


def list_files(directory: Path, patterns: Any) -> int:
    found = {}
    for pattern in patterns:
        matches: list[list[object]] = []
        for path in sorted(directory.glob(pattern)) if directory.is_dir() else ():
            if len(matches) >= 1000:
                break
            try:
                info = path.lstat()
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                relative = path.relative_to(directory).as_posix()
                matches.append([relative, info.st_size, info.st_mtime])
        found[pattern] = matches
    emit({"files": found})
    return 0


def staged_already(code_dir: Path, manifest: dict[str, Any]) -> int:
    """A host sharing the workdir staged the run's code: it must be the same code."""
    for relative, (digest, _) in sorted(manifest.items()):
        try:
            same = sha256_of(code_dir / relative) == digest
        except OSError:
            same = False
        if not same:
            emit({"error": f"{code_dir} exists already, with other code ({relative})"})
            return 1
    emit({"staged": len(manifest), "shared": True})
    return 0


def write(path: Path, text: Any) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)
    emit({"written": len(text)})
    return 0
