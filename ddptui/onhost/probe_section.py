"""What every section of the probe shares: a section never raises. One that fails is recorded
as ``{"error": "…"}`` and the others still report."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

COMMAND_TIMEOUT_S = 10.0
"""How long one command the probe runs (``nvidia-smi``, ``ip``) may take."""


class SectionError(Exception):
    """A section's own explanation of why it has no value (shown as-is to the user)."""


def describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return type(exc).__name__ + (": " + text if text else "")


def section(collect: Callable[[], Any]) -> Any:
    try:
        return collect()
    except SectionError as exc:
        return {"error": str(exc)}
    except Exception as exc:
        return {"error": describe(exc)}


def maybe(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None
