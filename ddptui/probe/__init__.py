"""The host probe: the program (:mod:`ddptui.onhost.probe` and its sections) sent to each host
and the arguments it takes.

The program runs on the host's own Python, never inside ddptui; :mod:`ddptui.probe.parse`
reads what it prints into the values of :mod:`ddptui.probe.facts`.
"""

from __future__ import annotations

from ddptui.remote.programs import probe_program

PROBE_SOURCE: str = probe_program()
"""The probe's program, ready to send on stdin to ``python - *probe_args(…)``."""

DEFAULT_TORCH_TIMEOUT_S = 20.0
"""How long ``import torch`` may take on a host before the probe reports a ``timeout``."""


def probe_args(
    workdir: str,
    *,
    master_port: int | None = None,
    master_addr: str | None = None,
    torch_timeout: float = DEFAULT_TORCH_TIMEOUT_S,
) -> list[str]:
    """The script's own arguments (what follows ``python -``).

    Args:
        workdir: The host's workdir as configured; a leading ``~`` is expanded on the host.
        master_port: Node 0 only: the port whose availability the probe reports.
        master_addr: Node 0's address as every host's torchrun gets it (``--master_addr``);
            the probe reports what it resolves to on the host.
        torch_timeout: Seconds allowed for importing torch in the probe's subprocess.
    """
    args = ["--workdir", workdir, "--torch-timeout", f"{torch_timeout:g}"]
    if master_port is not None:
        args += ["--master-port", str(master_port)]
    if master_addr is not None:
        args += ["--master-addr", master_addr]
    return args
