"""Which hosts share a workdir, found from their answers: any answer a host gives is read as
whole ASCII numbers or nothing (``"²".isdigit()`` is true and ``int("²")`` raises, which on the
landed code ended ``ddptui check`` and ``launch`` for every host)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path

from ddptui.check.run import _find_shared_workdirs
from ddptui.config.model import HostConfig
from ddptui.health import HostCheck
from ddptui.probe.parse import parse_facts
from ddptui.remote.commands import CommandResult
from ddptui.remote.status import Reach, Reachability

FACTS = parse_facts(
    (Path(__file__).parents[1] / "fixtures" / "probe" / "h200_idle_nvml.json").read_text()
)


class Listing:
    """Hosts whose ``list`` step answers as given; the others' steps succeed quietly."""

    def __init__(self, listed: Mapping[str, str]) -> None:
        self.listed = listed

    async def run(
        self, host: HostConfig, argv: Sequence[str], *, timeout: float, **_: object
    ) -> CommandResult:
        said = self.listed.get(host.name, "") if "list" in argv else ""
        return CommandResult(0, said, "")


def shared(listed: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    checks = [
        HostCheck(HostConfig(name, f"10.0.0.{i}"), Reachability(Reach.OK, "ok"), facts=FACTS)
        for i, name in enumerate(("a", "b", "c"))
    ]
    found = asyncio.run(_find_shared_workdirs(Listing(listed), checks))  # type: ignore[arg-type]
    return {check.host.name: check.workdir_shared_with for check in found}


def test_digits_that_are_not_ascii_or_too_long_are_no_host() -> None:
    # a saw c, b saw a: what either of two hosts saw holds for both.
    assert shared({"a": "² ٣ 2 " + "9" * 5000, "b": "0\n1", "c": "²"}) == {
        "a": ("b", "c"),
        "b": ("a",),
        "c": ("a",),
    }


def test_a_host_that_listed_and_took_its_mark_away_first_still_shares_with_the_later_one() -> None:
    # b listed first and saw a's mark; a listed after b's was gone and saw only its own.
    assert shared({"a": "0", "b": "0 1"}) == {"a": ("b",), "b": ("a",), "c": ()}
