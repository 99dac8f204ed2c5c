"""Small English helpers shared by the findings' messages."""

from __future__ import annotations

from collections.abc import Sequence


def plural(count: int, word: str, suffix: str = "s") -> str:
    """``plural(1, "GPU")`` → ``"1 GPU"``; ``plural(2, "GPU")`` → ``"2 GPUs"``."""
    return f"{count:,} {word}{'' if count == 1 else suffix}"


def and_list(names: Sequence[str]) -> str:
    """``["a", "b", "c"]`` → ``"a, b and c"``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
