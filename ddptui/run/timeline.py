"""A launch's timeline: when each host passed each stage, from the command to the first step.

Pure. The stamps come from the check (``checking`` … ``checked``), the supervisor (``staged``,
``started``) and each node's ranks (``spawned`` … ``first_step``: their events, on
the host's clock, moved onto the head node's by the offset the check measured). A stage lasts
from the host's previous stamp to its own, so a host's stages add up to when it reached its
last one; an attempt that a resume starts has no check and no staging.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ddptui.run.following.nccl_init import NcclInit

STAGES: tuple[tuple[str, str], ...] = (
    ("checking", "starting ddptui"),
    ("connected", "connecting over SSH"),
    ("probed", "probing the host"),
    ("checked", "waiting for the check's other hosts"),
    ("staged", "starting the supervisor and staging the code"),
    ("started", "starting torchrun"),
    ("spawned", "torchrun starting the ranks"),
    ("imported", "importing torch"),
    ("rendezvous", "the rendezvous"),
    ("ready", "building the model and loading data"),
    ("first_step", "the first step"),
)
"""Each stage's key, in order, and what the time before it was spent on."""

ORDER = {key: index for index, (key, _) in enumerate(STAGES)}
DOING = dict(STAGES)

MAX_STAMP_AGE_S = 7 * 24 * 3600.0
"""A stamp this long before the launch began, or after it, is a host's clock gone wrong."""


@dataclass(frozen=True)
class Stage:
    """One stage of one host: ``key`` ended ``at_s`` seconds into the launch, after
    ``took_s``."""

    key: str
    at_s: float
    took_s: float
    since: str | None = None
    """The host's stage before this one (None: the launch began)."""

    @property
    def doing(self) -> str:
        """What the stage's time went to; where stages between were not told of, from the
        first of them to this one (``torchrun starting the ranks … building the model``)."""
        # A host's first stage spans nothing else: a resume has no check or staging.
        if self.since is None or ORDER[self.since] + 1 == ORDER[self.key]:
            return DOING[self.key]
        first = ORDER[self.since] + 1
        return f"{STAGES[first][1]} … {DOING[self.key]}"


@dataclass
class Timeline:
    """One attempt's launch: when it began (head clock) and each host's stamps."""

    attempt: int
    began: float
    hosts: dict[str, dict[str, float]] = field(default_factory=dict)
    nccl: dict[str, NcclInit] = field(default_factory=dict)
    """Each host's slowest rank's communicator start as NCCL timed it, where NCCL said."""

    def stamp(self, host: str, stage: str, at: float) -> bool:
        """Record that ``host`` reached ``stage`` at ``at`` (head clock) unless it already
        had; whether this was new. Unknown stages and impossible times are not taken."""
        if (
            stage not in ORDER
            or stage in self.hosts.get(host, {})
            or not math.isfinite(at)
            or abs(at - self.began) > MAX_STAMP_AGE_S
        ):
            return False
        self.hosts.setdefault(host, {})[stage] = at
        return True

    def note_nccl(self, host: str, init: NcclInit) -> bool:
        """Keep ``init`` as ``host``'s if it took longer than the one kept; whether it did."""
        kept = self.nccl.get(host)
        if kept is not None and kept.total_s >= init.total_s:
            return False
        self.nccl[host] = init
        return True

    def copy(self) -> Timeline:
        return Timeline(
            self.attempt,
            self.began,
            {host: dict(stamps) for host, stamps in self.hosts.items()},
            dict(self.nccl),
        )

    def stages(self, host: str) -> list[Stage]:
        """``host``'s stages in order. A stamp earlier than the one before it (clocks that do
        not quite agree) ends its stage when the one before ended."""
        stamps = self.hosts.get(host, {})
        found: list[Stage] = []
        previous, since = self.began, None
        for key in sorted(stamps, key=ORDER.__getitem__):
            at = max(stamps[key], previous)
            found.append(Stage(key, at - self.began, at - previous, since))
            previous, since = at, key
        return found

    def reached(self, host: str) -> float | None:
        """Seconds into the launch when ``host`` reached its latest stage."""
        stages = self.stages(host)
        return stages[-1].at_s if stages else None

    def complete(self, hosts: Iterable[str]) -> bool:
        """Whether every one of ``hosts`` made its first step."""
        return all("first_step" in self.hosts.get(host, {}) for host in hosts)

    def first_step_s(self, hosts: Iterable[str]) -> float | None:
        """Seconds until every one of ``hosts`` made its first step; None until then."""
        hosts = list(hosts)
        if not hosts or not self.complete(hosts):
            return None
        reached = [self.reached(host) for host in hosts]
        return max(value for value in reached if value is not None)

    def slowest(self, hosts: Iterable[str]) -> str | None:
        """The host that reached its latest stage last (the one the others waited for)."""
        timed = [(reached, host) for host in hosts if (reached := self.reached(host)) is not None]
        return max(timed)[1] if timed else None

    def longest(self, host: str) -> Stage | None:
        stages = self.stages(host)
        return max(stages, key=lambda stage: stage.took_s) if stages else None

    def summary(self, hosts: Iterable[str]) -> str | None:
        """``first step in 8.9 s; slowest: node2, 5.1 s importing torch``; None until every
        host made its first step."""
        hosts = list(hosts)
        took = self.first_step_s(hosts)
        slowest = self.slowest(hosts)
        if took is None or slowest is None:
            return None
        line = f"first step in {took:.1f} s"
        longest = self.longest(slowest)
        if len(hosts) > 1 and longest is not None:
            line += f"; slowest: {slowest}, {longest.took_s:.1f} s {longest.doing}"
        elif longest is not None:
            line += f"; longest stage: {longest.took_s:.1f} s {longest.doing}"
        return line

    def to_document(self) -> dict[str, Any]:
        """The record's form (TOML: host names are keys, so quoted where they must be)."""
        hosts = {host: dict(stamps) for host, stamps in self.hosts.items()}
        document: dict[str, Any] = {"attempt": self.attempt, "began": self.began, "hosts": hosts}
        if self.nccl:
            document["nccl"] = {host: init.to_document() for host, init in self.nccl.items()}
        return document

    @classmethod
    def from_document(cls, data: Mapping[str, Any]) -> Timeline:
        """The record's form back; :class:`TypeError` or :class:`KeyError` when it is not."""
        attempt, began = data["attempt"], data["began"]
        if type(attempt) is not int or not isinstance(began, int | float):
            raise TypeError("a timeline's attempt or began is not a number")
        timeline = cls(attempt, float(began))
        hosts = data.get("hosts", {})
        if not isinstance(hosts, dict):
            raise TypeError("a timeline's hosts are not a table")
        for host, stamps in hosts.items():
            if not isinstance(stamps, dict):
                raise TypeError(f"{host}'s timeline is not a table")
            for stage, at in stamps.items():
                if isinstance(at, int | float) and not isinstance(at, bool):
                    timeline.stamp(str(host), str(stage), float(at))
        nccl = data.get("nccl", {})
        if isinstance(nccl, dict):
            for host, kept in nccl.items():
                init = NcclInit.from_document(kept)
                if init is not None:
                    timeline.note_nccl(str(host), init)
        return timeline

    def to_json(self, hosts: Iterable[str]) -> dict[str, Any]:
        """The ``status --json`` form (docs/events.md, "The launch timeline")."""
        hosts = list(hosts)
        took = self.first_step_s(hosts)
        return {
            "attempt": self.attempt,
            "began": self.began,
            "first_step_s": None if took is None else round(took, 3),
            "slowest": self.slowest(hosts) if took is not None else None,
            "summary": self.summary(hosts),
            "hosts": [
                {
                    "host": host,
                    "stages": [
                        {
                            "stage": stage.key,
                            "doing": stage.doing,
                            "at_s": round(stage.at_s, 3),
                            "took_s": round(stage.took_s, 3),
                        }
                        for stage in self.stages(host)
                    ],
                    "nccl_init": None if host not in self.nccl else self.nccl[host].to_json(),
                }
                for host in hosts
            ],
        }


def node_stamps(
    ranks: Mapping[int, Mapping[str, float]], expected: Iterable[int]
) -> dict[str, float]:
    """One node's rank-side stamps from its ranks' (``process``, ``imported``, ``rendezvous``,
    ``ready``, ``first_step``; host clock): each stage once every expected rank reported it,
    the ranks' earliest process start (torchrun started them) and otherwise the latest (the
    node waited for it)."""
    expected = list(expected)
    found: dict[str, float] = {}
    for key, stage in (
        ("process", "spawned"),
        ("imported", "imported"),
        ("rendezvous", "rendezvous"),
        ("ready", "ready"),
        ("first_step", "first_step"),
    ):
        values = [ranks.get(rank, {}).get(key) for rank in expected]
        present = [value for value in values if value is not None]
        if expected and len(present) == len(expected):
            found[stage] = min(present) if key == "process" else max(present)
    return found
