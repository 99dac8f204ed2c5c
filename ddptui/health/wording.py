"""Small English helpers shared by the findings' messages."""

from __future__ import annotations

from collections.abc import Sequence


def plural(count: int, word: str, suffix: str = "s") -> str:
    """``plural(1, "GPU")`` → ``"1 GPU"``; ``plural(2, "GPU")`` → ``"2 GPUs"``."""
    return f"{count:,} {word}{'' if count == 1 else suffix}"


def and_list(names: Sequence[str]) -> str:
    """``["a", "b", "c"]`` → ``"a, b and c"``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


MAX_NAMED_HOSTS = 8
"""A longer list of hosts is cut to its first few and a count."""


def hosts_list(names: Sequence[str]) -> str:
    """``"a, b and c"``, or past :data:`MAX_NAMED_HOSTS` the first few and a count: ``"a, b,
    … and 506 more hosts"`` (a finding among 512 hosts named the 509 that agree, one by one)."""
    if len(names) <= MAX_NAMED_HOSTS:
        return and_list(names) if names else ""
    shown = MAX_NAMED_HOSTS - 2
    return f"{', '.join(names[:shown])} and {len(names) - shown:,} more hosts"
