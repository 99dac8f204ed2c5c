"""Which hosts share a workdir, from the identities their probes found in it, and how the head
reads an identity a host sends: a well-formed one or none, never an exception."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from ddptui.check.run import shared_workdirs
from ddptui.config.model import HostConfig
from ddptui.health import HostCheck, ProbeFailure
from ddptui.probe.facts import NA
from ddptui.probe.parse import parse_facts
from ddptui.remote.status import Reach, Reachability

FACTS = parse_facts(
    (Path(__file__).parents[1] / "fixtures" / "probe" / "h200_idle_nvml.json").read_text()
)
NFS = "a" * 32 + "/4242"


def host(name: str, identity: object = NA) -> HostCheck:
    facts = dataclasses.replace(FACTS, workdir_identity=identity)
    return HostCheck(HostConfig(name, f"10.0.0.{len(name)}"), Reachability(Reach.OK, "ok"), facts)


def test_hosts_with_one_identity_share_and_the_others_do_not() -> None:
    checks = [
        host("a", NFS),
        host("b", "b" * 32 + "/7"),
        host("c", NFS),
        host("d"),
        host("e", NFS),
        HostCheck(
            HostConfig("f", "10.0.0.9"),
            Reachability(Reach.OK, "ok"),
            probe_failure=ProbeFailure("no JSON", exit_status=0),
        ),
    ]
    assert {check.host.name: check.workdir_shared_with for check in shared_workdirs(checks)} == {
        "a": ("c", "e"),
        "b": (),
        "c": ("a", "e"),
        "d": (),
        "e": ("a", "c"),
        "f": (),
    }


def identity(value: Any) -> object:
    return parse_facts(json.dumps({"probe_version": 1, "workdir_id": value})).workdir_identity


def test_a_well_formed_identity_is_read_with_its_inode() -> None:
    assert identity({"id": "0123456789abcdef" * 2, "inode": 2**64 - 1}) == (
        f"{'0123456789abcdef' * 2}/{2**64 - 1}"
    )


@pytest.mark.parametrize(
    "value",
    [
        None,
        "a" * 32,
        {"error": "Read-only file system"},
        {"id": "A" * 32, "inode": 1},
        {"id": "a" * 31, "inode": 1},
        {"id": "a" * 32 + "\n", "inode": 1},
        {"id": "a" * 32, "inode": -1},
        {"id": "a" * 32, "inode": 2**64},
        {"id": "a" * 32, "inode": True},
        {"id": "a" * 32, "inode": "1"},
        {"id": ["a" * 32], "inode": 1},
    ],
)
def test_anything_else_is_no_identity_and_no_error(value: Any) -> None:
    facts = parse_facts(json.dumps({"probe_version": 1, "workdir_id": value}))
    assert facts.workdir_identity is NA
    assert "workdir_id" not in facts.section_errors
