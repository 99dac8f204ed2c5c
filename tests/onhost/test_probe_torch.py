"""The probe's torch section run for real, with stand-ins for torch: a hanging import, and
what is kept of a successful one."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from ddptui.onhost.probe_torch_cache import TORCH_CACHE_DIR, cached_torch, torch_cache_path
from ddptui.probe.facts import HostFacts
from ddptui.probe.parse import parse_facts
from tests.fixtures.gpu import gpu_count
from tests.helpers import recorded_torch, run_probe
from tests.helpers.probe import PROBE_RECORDINGS

HANGING_TORCH = """
import os, sys, time
with open(os.environ["HANG_PID_FILE"], "w") as f:
    f.write(str(os.getpid()))
time.sleep(60)
"""
NCCL_BROKEN_TORCH = 'raise ImportError("libnccl.so.2: undefined symbol: ncclCommRegister")\n'


def test_hanging_torch_is_a_timeout_and_is_killed(tmp_path: Path) -> None:
    facts, elapsed = run_probe(
        tmp_path, python_path={"torch/__init__.py": HANGING_TORCH}, torch_timeout=1.0
    )
    assert facts.torch.status == "timeout"
    assert elapsed < 10
    pid = int((tmp_path / "hang.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_stand_in_answers_as_the_recorded_host(tmp_path: Path) -> None:
    torch = {"torch/__init__.py": recorded_torch("h200_idle_nvml")}
    facts, _ = run_probe(tmp_path, python_path=torch, smi_fixture="h200_idle")
    recorded = parse_facts((PROBE_RECORDINGS / "h200_idle_nvml.json").read_text())
    assert facts.torch == recorded.torch


COUNTED = 'open(__import__("os").environ["TORCH_IMPORTS"], "a").write("import\\n")\n'
"""Prepended to a stand-in torch: each import leaves a line in the file $TORCH_IMPORTS names."""


def test_torch_facts_are_kept_until_what_they_depend_on_changes(tmp_path: Path) -> None:
    imports = tmp_path / "imports"
    gpus = gpu_count("a100x2_busy")
    # One text throughout: rewriting it would be an upgrade of torch.
    torch = COUNTED + recorded_torch(device_count=gpus)

    def probe(fixture: str = "a100x2_busy", **env: str) -> tuple[HostFacts, int]:
        facts, _ = run_probe(
            tmp_path,
            python_path={"torch/__init__.py": torch},
            smi_fixture=fixture,
            extra_env={"TORCH_IMPORTS": str(imports), **env},
        )
        return facts, imports.read_text().count("import")

    first, imported = probe()
    assert imported == 1 and first.torch.ok and first.torch.device_count == gpus
    kept = tmp_path / "work" / TORCH_CACHE_DIR / f"torch-{socket.gethostname()}.json"
    assert kept.is_file()
    again, imported = probe()
    assert imported == 1 and again.torch == first.torch
    # Other GPUs made visible, or torch upgraded: imported afresh.
    assert probe(CUDA_VISIBLE_DEVICES="1")[1] == 2
    assert probe(CUDA_VISIBLE_DEVICES="1")[1] == 2
    (tmp_path / "site" / "torch" / "version.py").write_text("cuda = '12.4'\n")
    assert probe()[1] == 3
    # A newer ddptui asks torch more: what an older one kept is not reused.
    kept.write_text(kept.read_text().replace('"snippet": "', '"snippet": "0'))
    assert probe()[1] == 4
    # The driver gone: two GPUs kept but none listed, so torch is asked each time.
    for expected in (5, 6):
        gone, imported = probe("no_driver")
        assert imported == expected and gone.torch.ok


def test_a_failed_torch_import_is_not_kept(tmp_path: Path) -> None:
    imports = tmp_path / "imports"
    for expected in (1, 2):
        facts, _ = run_probe(
            tmp_path,
            python_path={"torch/__init__.py": COUNTED + NCCL_BROKEN_TORCH},
            extra_env={"TORCH_IMPORTS": str(imports)},
        )
        assert facts.torch.status == "error"
        assert imports.read_text().count("import") == expected


@pytest.mark.parametrize("kind", ["pipe", "link"])
def test_a_kept_answer_that_is_not_a_file_is_not_read(tmp_path: Path, kind: str) -> None:
    # Whoever else can write in the workdir could put a pipe there (the probe would hang on
    # it) or a link to an answer of their own.
    kept = torch_cache_path(str(tmp_path))
    kept.parent.mkdir(parents=True)
    fingerprint = {"torch": "the same"}
    if kind == "pipe":
        os.mkfifo(kept)
    else:
        planted = tmp_path / "planted.json"
        planted.write_text(json.dumps({"fingerprint": fingerprint, "facts": {"status": "ok"}}))
        kept.symlink_to(planted)
    assert cached_torch(str(tmp_path), fingerprint) is None
