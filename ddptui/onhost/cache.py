"""The host's cache of code contents (by SHA-256) and the code directory staged from it; files
written and listed for the head."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import socket
import stat
import time
from pathlib import Path
from typing import Any

from ddptui.onhost.common import (
    CACHE_DAYS,
    EXECUTABLE_MODE,
    FILE_MODE,
    PRIVATE_FILE_MODE,
    PYCACHE,
    READ_CHUNK,
    emit,
    make_dirs,
    open_file,
    write_atomic,
)


def sha256_of(path: Path, copy_to: Path | None = None, mode: int = FILE_MODE) -> str:
    """``path``'s SHA-256; with ``copy_to``, copied as it is read into that new file, made
    with ``mode``."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        if copy_to is None:
            for chunk in iter(lambda: handle.read(READ_CHUNK), b""):
                digest.update(chunk)
        else:
            with os.fdopen(open_file(copy_to, os.O_WRONLY | os.O_EXCL, mode), "wb") as out:
                for chunk in iter(lambda: handle.read(READ_CHUNK), b""):
                    digest.update(chunk)
                    out.write(chunk)
    return digest.hexdigest()


def lacking(cache: Path, digests: Any) -> list[Any]:
    """The contents of ``digests`` the cache lacks; those it has are touched (kept from
    pruning), and what no staging touched for a while is pruned."""
    missing = []
    now = time.time()
    for digest in digests:
        path = cache / str(digest)
        try:
            os.utime(path, (now, now))
        except OSError:
            missing.append(digest)
    if cache.is_dir():
        prune(cache)
    return missing


def put(cache: Path, sent: Any) -> int:
    make_dirs(cache)
    # Hosts sharing this cache upload the same content at once: each into a part of its own (the
    # same across this host's calls), so none renames or refills a part another still writes.
    host = socket.gethostname()
    for digest, offset, data, size in sent:
        part = cache / f"{digest}.{host}.part"
        handle = open_file(part, os.O_WRONLY, PRIVATE_FILE_MODE)
        try:
            os.pwrite(handle, base64.b64decode(data), int(offset))
            if size is not None:
                # What an upload that broke off left beyond the end is not the content's.
                os.ftruncate(handle, int(size))
        finally:
            os.close(handle)
        if size is None:
            continue
        good = sha256_of(part) == digest
        if good:
            part.replace(cache / str(digest))
        else:
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


def stage(cache: Path, code_dir: Path, record_path: Path, sent: Any) -> int:
    """One call per host and launch: what the cache lacks of the manifest (nothing else done),
    or the code directory laid out from the cache and the run record written beside it."""
    manifest, record = sent["manifest"], sent["record"]
    missing = lacking(cache, sorted({digest for digest, _ in manifest.values()}))
    if missing:
        emit({"missing": missing})
        return 0
    if code_dir.exists():
        if not staged_already(code_dir, manifest):
            return 1
        shared = True
    else:
        placed = _lay_out(cache, code_dir, manifest)
        if placed is None:
            return 1
        shared = not placed
    make_dirs(record_path.parent)
    write_atomic(record_path, record, PRIVATE_FILE_MODE)
    emit({"staged": len(manifest), "shared": shared, "written": len(record)})
    return 0


def _lay_out(cache: Path, code_dir: Path, manifest: dict[str, Any]) -> bool | None:
    """True once ``code_dir`` is laid out; False when a host sharing this workdir laid out the
    same code first; None when it cannot be (said)."""
    stage_dir = code_dir.with_name(".code-" + os.urandom(4).hex())
    placed = False
    try:
        for relative, (digest, executable) in sorted(manifest.items()):
            target = stage_dir / relative
            make_dirs(target.parent / PYCACHE if relative.endswith(".py") else target.parent)
            mode = EXECUTABLE_MODE if executable else FILE_MODE
            try:
                copied = sha256_of(cache / digest, copy_to=target, mode=mode)
            except OSError as error:
                emit({"error": f"{relative}: {error}"})
                return None
            if copied != digest:
                emit({"error": f"{relative}: the cached copy is damaged (checksum mismatch)"})
                (cache / digest).unlink()
                return None
        try:
            stage_dir.rename(code_dir)
        except OSError:
            if not code_dir.exists():
                raise
            # A host sharing this workdir renamed its copy into place first.
            return False if staged_already(code_dir, manifest) else None
        placed = True
    finally:
        if not placed:
            shutil.rmtree(str(stage_dir), ignore_errors=True)
    return True


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


def staged_already(code_dir: Path, manifest: dict[str, Any]) -> bool:
    """Whether the code a host sharing the workdir staged is the same code (said when not)."""
    for relative, (digest, _) in sorted(manifest.items()):
        try:
            same = sha256_of(code_dir / relative) == digest
        except OSError:
            same = False
        if not same:
            emit({"error": f"{code_dir} exists already, with other code ({relative})"})
            return False
    return True


def write(path: Path, text: Any) -> int:
    make_dirs(path.parent)
    write_atomic(path, text)
    emit({"written": len(text)})
    return 0
