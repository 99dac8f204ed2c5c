"""Why a connection failed, in words: each cause says what it is, not another's words."""

from __future__ import annotations

import asyncio
import errno
import socket

import pytest

from ddptui.config.model import HostConfig
from ddptui.remote.failures import network_failure
from ddptui.remote.status import Reach

HOST = HostConfig("gpu-b", "10.0.0.2")


@pytest.mark.parametrize(
    ("error", "reach", "said"),
    [
        (asyncio.TimeoutError(), Reach.TIMEOUT, "did not answer within 10 s"),
        (
            OSError(errno.EHOSTUNREACH, "No route to host"),
            Reach.TIMEOUT,
            "cannot be reached (No route to host)",
        ),
        (
            OSError(errno.ENETUNREACH, "Network is unreachable"),
            Reach.TIMEOUT,
            "cannot be reached (Network is unreachable)",
        ),
        (ConnectionRefusedError(), Reach.REFUSED, "refused the connection"),
        (socket.gaierror(-2, "Name or service not known"), Reach.DNS_FAILED, "does not resolve"),
    ],
)
def test_each_cause_is_said_as_it_is(error: BaseException, reach: Reach, said: str) -> None:
    failure = network_failure(HOST, error, 10.0)
    assert failure.reach is reach
    assert said in failure.detail, failure.detail
    if reach is Reach.TIMEOUT and "cannot be reached" in said:
        # ARP gave up after about 3 s: no claim that the whole timeout went by.
        assert "within" not in failure.detail
