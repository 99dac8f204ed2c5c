"""The host's content cache as hosts sharing a workdir (an NFS home) write it at once."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from ddptui.onhost import cache


def _pieces(content: bytes, size: int) -> list[list[object]]:
    digest = hashlib.sha256(content).hexdigest()
    offsets = range(0, len(content), size)
    return [
        [digest, offset, base64.b64encode(content[offset : offset + size]).decode(), None]
        for offset in offsets
    ]


def _put_as(host: str, shared: Path, piece: list[object], monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(cache.socket, "gethostname", lambda: host)
    return cache.put(shared, [piece])


def test_hosts_uploading_the_same_content_into_one_cache_at_once_both_succeed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    content = bytes(range(256)) * 40
    pieces = _pieces(content, 4096)
    pieces[-1][3] = len(content)
    # Interleaved piece by piece: node1 finishes (and renames its upload into place) while node2
    # has yet to send its last piece.
    for piece in pieces:
        for host in ("node1", "node2"):
            assert _put_as(host, tmp_path, piece, monkeypatch) == 0
    digest = hashlib.sha256(content).hexdigest()
    assert (tmp_path / digest).read_bytes() == content
    assert [p.name for p in tmp_path.iterdir()] == [digest]
    said = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert said == [{"stored": 1}] * len(pieces) * 2


def test_a_damaged_upload_is_refused_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    content = b"print('hello')\n"
    (piece,) = _pieces(content, 1024)
    piece[2] = base64.b64encode(b"print('HELLO')\n").decode()
    piece[3] = len(content)
    assert _put_as("node1", tmp_path, piece, monkeypatch) == 1
    assert list(tmp_path.iterdir()) == []
    assert "arrived damaged: checksum mismatch" in capsys.readouterr().out
