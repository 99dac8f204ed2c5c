"""benchmarks/gpu_sample.py's recorder: what it writes of a host's NVML is what the pynvml
double replays, so a GPU host's recording is a fixture as it stands."""

from __future__ import annotations

import sys
import types

import pytest

from benchmarks.gpu_sample import record_nvml
from tests.fixtures.nvml import MACHINES, machine, pynvml_double


@pytest.mark.parametrize("name", MACHINES)
def test_a_recording_of_a_machine_is_that_machine(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = types.ModuleType("pynvml")
    exec(compile(pynvml_double(name), "pynvml.py", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    assert record_nvml() == machine(name)
