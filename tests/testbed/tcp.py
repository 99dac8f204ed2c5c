"""How a TCP connect ends: "open", "refused", "timeout" or "error: …".

Importable, and runnable as a script on a test-bed host (stdlib only):
``python tcp.py ADDRESS PORT TIMEOUT``.
"""

from __future__ import annotations

import socket
import sys


def outcome(address: str, port: int, timeout: float) -> str:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return "open"
    except TimeoutError:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as exc:
        return f"error: {exc.strerror}"


def banner(address: str, port: int = 22, timeout: float = 2.0) -> bytes:
    """The first bytes a server sends (b"" if it sends nothing within ``timeout``)."""
    with socket.create_connection((address, port), timeout=timeout) as sock:
        try:
            return sock.recv(64)
        except TimeoutError:
            return b""


if __name__ == "__main__":
    print(outcome(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
