"""How far the head node got with one host: the remote layer's verdict, as a value."""

from __future__ import annotations

import enum
from dataclasses import dataclass

TRUST_ADVICE = ": check the fingerprint, then run `ddptui trust HOSTS`"
"""How an unknown host key's detail ends: what to do, where no finding's fix says it."""


class Reach(enum.Enum):
    """Outcome of connecting to a host and starting its Python. Values are stable codes."""

    OK = "ok"
    DNS_FAILED = "dns_failed"
    REFUSED = "refused"
    TIMEOUT = "timeout"
    AUTH_FAILED = "auth_failed"
    KEY_UNUSABLE = "key_unusable"
    """The key to offer cannot be used on this machine (identity_file missing, unreadable)."""
    HOSTKEY_UNKNOWN = "hostkey_unknown"
    HOSTKEY_CHANGED = "hostkey_changed"
    HOSTKEY_REVOKED = "hostkey_revoked"
    PYTHON_MISSING = "python_missing"
    ERROR = "error"


@dataclass(frozen=True)
class Reachability:
    """``reach`` plus the human detail behind it: error text, keys offered, a fingerprint."""

    reach: Reach
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.reach is Reach.OK
