"""Builders that more than one test module uses, imported from here: ``from tests.helpers import``.

- :mod:`tests.helpers.hostile_server`: in-process SSH servers that misbehave as a broken or
  malicious host would (``HostileSshServer``, one ``Behaviour`` each).
- :mod:`tests.helpers.health`: a healthy three-host cluster's facts (``Scenario``) and ways to
  break it, for the findings, the launch plan and the hints.
- :mod:`tests.helpers.probe`: the probe script run on this machine with stand-ins for torch.
- :mod:`tests.helpers.diagnose`: the test bed's recorded failures replayed into a ``Diagnoser``.
- :mod:`tests.helpers.shells`: hosts-file values that break login shells, and what reaches a host.
- :mod:`tests.helpers.users`: two users sharing a primary group, played as root by forked
  children: what one of them can change of what ddptui made for the other.

Test modules never import from one another; a builder a second module needs moves here.
"""

from tests.helpers.diagnose import Replay, check_first_failure, replay, top_diagnosis
from tests.helpers.health import (
    ADDRESSES,
    A,
    B,
    C,
    Scenario,
    cpu_host,
    gpu,
    healthy_facts,
    interfaces,
    master_resolves,
    master_unresolvable,
    named_master,
)
from tests.helpers.hostile_server import Behaviour, HostileSshServer, served
from tests.helpers.probe import recorded_torch, run_probe, torch_recording, write_package
from tests.helpers.shells import (
    FIELDS,
    HOSTS_FILE,
    PRINTF,
    TRICKY,
    hosts_text,
    nasty,
    remote_values,
)
from tests.helpers.users import (
    OTHER,
    USER,
    as_user,
    attempts_to_replace,
    owned_dir,
    shared_tmp,
)

__all__ = [
    "ADDRESSES",
    "FIELDS",
    "HOSTS_FILE",
    "OTHER",
    "PRINTF",
    "TRICKY",
    "USER",
    "A",
    "B",
    "Behaviour",
    "C",
    "HostileSshServer",
    "Replay",
    "Scenario",
    "as_user",
    "attempts_to_replace",
    "check_first_failure",
    "cpu_host",
    "gpu",
    "healthy_facts",
    "hosts_text",
    "interfaces",
    "master_resolves",
    "master_unresolvable",
    "named_master",
    "nasty",
    "owned_dir",
    "recorded_torch",
    "remote_values",
    "replay",
    "run_probe",
    "served",
    "shared_tmp",
    "top_diagnosis",
    "torch_recording",
    "write_package",
]
