"""Every value in a fix hint is shell-quoted: a pasted fix runs exactly the command it shows."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace

import pytest

from ddptui.health import Code, Finding, ProbeFailure
from ddptui.probe.facts import PythonFacts, TorchFacts
from ddptui.remote.status import Reach, Reachability
from tests.helpers import B, Scenario

HOSTILE = "/opt/it's; touch /tmp/owned #/python"
COMMAND = re.compile(r"`([^`]*)`")


def hint_for(scenario: Scenario, code: Code) -> str:
    (finding,) = [f for f in scenario.run() if f.code is code and f.host == B]
    return finding.hint


def commands(finding_hint: str) -> list[list[str]]:
    return [shlex.split(command) for command in COMMAND.findall(finding_hint)]


def test_a_configured_python_path_survives_the_probe_failed_hint() -> None:
    scenario = Scenario()
    scenario.host(B, python=HOSTILE)
    scenario.facts[B] = None
    scenario.probe_failures[B] = ProbeFailure("it exited with an error", 1)
    (command,) = commands(hint_for(scenario, Code.PROBE_FAILED))
    assert command[0] == HOSTILE


def test_a_python_path_the_host_reported_survives_the_torch_hints() -> None:
    scenario = Scenario()
    scenario.edit(B, python=PythonFacts(version="3.11.9", executable=HOSTILE, is_conda=False))
    scenario.edit(B, torch=TorchFacts(status="timeout"))
    (command,) = commands(hint_for(scenario, Code.TORCH_IMPORT_TIMEOUT))
    assert command == [HOSTILE, "-c", "import torch"]


@pytest.mark.parametrize("reach", [Reach.ERROR, Reach.HOSTKEY_CHANGED])
def test_ssh_hints_quote_the_login_and_the_known_hosts_entry(reach: Reach) -> None:
    scenario = Scenario()
    scenario.host(B, user="it's", port=2222)
    scenario.reach[B] = Reachability(reach, "detail")
    finding: Finding = next(f for f in scenario.run() if f.host == B)
    hint = finding.hint
    if reach is Reach.ERROR:
        assert commands(hint) == [["ssh", "-p", "2222", "it's@10.0.0.2"]]
    else:
        (keygen,) = re.findall(r"\((ssh-keygen [^,]*),", hint)
        assert shlex.split(keygen) == ["ssh-keygen", "-R", "[10.0.0.2]:2222"]


def test_package_pins_from_a_host_are_quoted() -> None:
    scenario = Scenario()
    evil = "numpy;touch /tmp/owned"
    for name in ("gpu-a", "gpu-c"):
        facts = scenario.facts[name]
        assert facts is not None
        scenario.facts[name] = replace(facts, pip_packages={"torch": "2.4.1+cu121", evil: "1 2"})
    hint = hint_for(scenario, Code.PACKAGE_DRIFT)
    # "python3 -m pip install PINS; install … on the other hosts or remove them"
    install = shlex.split(hint.split("; install ")[0])
    assert install[:4] == ["python3", "-m", "pip", "install"]
    assert f"{evil}==1 2" in install
