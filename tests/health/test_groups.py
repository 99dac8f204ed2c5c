"""One entry for a finding several hosts share, in words that read for all of them."""

from __future__ import annotations

from ddptui.health import Code
from ddptui.health.groups import group_findings
from ddptui.remote.status import Reach
from tests.helpers import A, B, C, Scenario


def test_a_key_this_machine_cannot_use_is_said_once_for_every_host_sharing_it() -> None:
    scenario = Scenario()
    for name in (A, B, C):
        scenario.unreached(name, Reach.KEY_UNUSABLE, "cannot use identity_file /k: no such file")
    [group] = [
        group for group in group_findings(scenario.run()) if group.code is Code.SSH_KEY_UNUSABLE
    ]
    assert group.hosts == (A, B, C)
    assert "ssh-copy-id" not in group.hint and "ssh-keygen" in group.hint


def test_hosts_whose_hostname_is_their_name_group_into_words_that_read() -> None:
    scenario = Scenario()
    for name in (A, B):
        scenario.edit(name, hostname=name, resolve_error="Name or service not known")
    [group] = [
        group
        for group in group_findings(scenario.run())
        if group.code is Code.HOSTNAME_UNRESOLVABLE
    ]
    assert group.hosts == (A, B)
    assert group.message.startswith("its own hostname does not resolve on each host")
    # The run sets the socket interface already: the fix does not ask for it again.
    assert "socket_ifname" not in group.hint
