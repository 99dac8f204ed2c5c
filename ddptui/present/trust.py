"""The trust report's words: each host's key and its verdict, as ``ddptui trust`` prints them
and the console's ``t`` shows them before asking to add a key; why a changed or revoked key is
refused; whether every host is trusted."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from ddptui.remote import failures
from ddptui.remote.hostkeys import KeyState, fingerprint
from ddptui.remote.trust import HostKeyScan
from ddptui.untrusted import plain

_VERDICTS = {
    KeyState.TRUSTED: ("already trusted", "green"),
    KeyState.UNKNOWN: ("new", "yellow"),
    KeyState.CHANGED: ("CHANGED: refusing to replace the recorded key", "bold red"),
    KeyState.REVOKED: ("REVOKED: marked @revoked, never trusted", "bold red"),
}
_BY_AUTHORITY = ("trusted: certificate signed by a @cert-authority", "green")


def host_key_line(scan: HostKeyScan) -> Text:
    """One line for one host: ``NAME  ADDRESS:PORT (known as KEY_NAME)  ALGO SHA256:…  VERDICT``,
    or ``NAME  ADDRESS:PORT  unreachable: WHY`` with the reason through the sanitiser.

    "known as" appears when ``~/.ssh/config`` files the host's key under another name
    (HostName, HostKeyAlias); a key trusted through a ``@cert-authority`` says so.
    """
    line = Text.assemble((f"{scan.host.name}  {scan.host.address}:{scan.host.port}", "bold"))
    if scan.target is not None and scan.target.key_name != scan.host.address:
        line.append(f" (known as {scan.target.key_name})")
    if scan.check is None:
        detail = scan.failure.detail if scan.failure is not None else "no answer"
        line.append(f"  unreachable: {plain(detail, one_line=True)}", "red")
        return line
    key = scan.check.presented
    verdict, style = _BY_AUTHORITY if scan.check.by_authority else _VERDICTS[scan.check.state]
    line.append(f"  {key.get_algorithm()} {fingerprint(key)}  ")
    line.append(verdict, style)
    return line


_REFUSED = (KeyState.CHANGED, KeyState.REVOKED)


def refusal(scan: HostKeyScan) -> str | None:
    """Why a host's key is refused, at length (the recorded key, where, what to do), for a key
    that changed or is revoked; None for any other."""
    if scan.check is None or scan.check.state not in _REFUSED:
        return None
    return failures.host_key_failure(scan.host, scan.check).detail


def all_trusted(scans: Sequence[HostKeyScan]) -> bool:
    """Whether every host answered and none of their keys is refused (an unknown key counts as
    trusted once added)."""
    return all(scan.check is not None and scan.check.state not in _REFUSED for scan in scans)
