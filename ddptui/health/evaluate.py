"""``evaluate``: every host's check → the list of findings ``ddptui check`` reports."""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Sequence

from ddptui.config.model import Config, HostConfig
from ddptui.health.findings import Code, Finding, HostCheck, ProbeFailure, Severity
from ddptui.health.gpu_health import gpu_health_findings
from ddptui.health.gpus import gpu_findings
from ddptui.health.network import network_findings, port_findings
from ddptui.health.parity import package_findings, parity_findings
from ddptui.health.resources import present_gpus, procs_per_node
from ddptui.health.workdir import workdir_findings
from ddptui.health.xid import xid_findings
from ddptui.probe.facts import NA, HostFacts
from ddptui.remote.status import TRUST_ADVICE, Reach

BYTES_PER_GB = 1e9
RANK_MEMORY_BYTES = 320 * 2**20
"""What a rank that has imported torch holds at least (the bundled trainer on CPU: 316 MiB
RSS; a CUDA rank's host memory is larger): a host with less than this per process will swap
or kill ranks."""
MEMORY_SHARE = 0.9
"""Of a host's memory, what its ranks may take: the system and the loader need the rest."""
_SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def evaluate(config: Config, checks: Sequence[HostCheck]) -> list[Finding]:
    """All findings for the cluster: errors first, then warnings, then information.

    Within a severity, findings keep node-rank order. Hosts that could not be probed get
    their reachability finding and are left out of every comparison.
    """
    rank = {host.name: index for index, host in enumerate(config.ordered_hosts)}
    ordered = sorted(checks, key=lambda check: rank.get(check.host.name, len(rank)))
    probed = [(check.host, check.facts) for check in ordered if check.facts is not None]
    findings: list[Finding] = []
    for check in ordered:
        findings += _host_findings(config, check)
    findings += parity_findings(probed)
    findings += gpu_findings(config, probed)
    findings += network_findings(config, probed)
    findings += port_findings(config, ordered)
    findings += package_findings(probed)
    return sorted(findings, key=lambda finding: _SEVERITY_ORDER[finding.severity])


def _host_findings(config: Config, check: HostCheck) -> Iterator[Finding]:
    host = check.host
    if not check.reach.ok:
        yield _unreached(config, check)
        return
    if check.facts is None:
        yield _probe_failed(host, check.probe_failure)
        return
    facts = check.facts
    if facts.section_errors:
        sections = "; ".join(f"{name}: {error}" for name, error in facts.section_errors.items())
        yield Finding(
            Code.PROBE_INCOMPLETE,
            Severity.WARNING,
            host.name,
            f"the probe could not read everything on {host.name} ({sections}); "
            "checks that need those facts were skipped",
            "the reasons above name what is missing on the host",
        )
    yield from _torch_findings(config, host, facts)
    yield from _disk_findings(config, host, facts)
    yield from workdir_findings(host, facts)
    yield from _process_findings(config, host, facts)
    yield from xid_findings(host, facts)
    yield from gpu_health_findings(host, facts)
    if check.workdir_shared_with:
        yield _shared_workdir(check, facts)
    if check.clock_offset_s is not None and abs(check.clock_offset_s) > (
        config.cluster.max_clock_skew_s
    ):
        yield Finding(
            Code.CLOCK_SKEW,
            Severity.WARNING,
            host.name,
            f"{host.name}'s clock is {check.clock_offset_s:+.1f} s off the head node's "
            f"(more than {config.cluster.max_clock_skew_s:g} s), so logs and events from "
            "different hosts will be misordered",
            "enable time sync on every host (timedatectl set-ntp true, or chrony)",
        )


def _probe_failed(host: HostConfig, failure: ProbeFailure | None) -> Finding:
    reason = failure.reason if failure is not None else "it returned no usable facts"
    status = ""
    if failure is not None and failure.exit_status is not None:
        status = f" (exit status {failure.exit_status})"
    stderr = f"; its stderr ends:\n{failure.stderr_tail}" if failure and failure.stderr_tail else ""
    interpreter = f"conda env {host.conda_env!r}" if host.conda_env else host.python
    return Finding(
        Code.PROBE_FAILED,
        Severity.ERROR,
        host.name,
        f"{host.name} answered over SSH, but the probe failed under {interpreter}: "
        f"{reason}{status}{stderr}",
        f"the probe needs Python 3.8 or newer: run `{shlex.quote(host.python)} -c 'import sys; "
        f"print(sys.version)'` on {host.name}; if that prints no version, set python (or "
        "conda_env) for it. A shell start-up file that prints text is another usual cause",
    )


def _unreached(config: Config, check: HostCheck) -> Finding:
    host = check.host
    detail = f": {check.reach.detail}" if check.reach.detail else ""
    target = f"{host.user + '@' if host.user else ''}{host.address}:{host.port}"
    # Every value in a fix is quoted: users paste these lines into a shell.
    login = shlex.quote(target.rsplit(":", 1)[0])
    reach = check.reach.reach
    if reach is Reach.KEY_UNUSABLE:
        key = host.identity_file or "~/.ssh/id_ed25519"
        # This machine's problem, not the host's: the same words for every host that shares
        # the key, so they are said once.
        return Finding(
            Code.SSH_KEY_UNUSABLE,
            Severity.ERROR,
            host.name,
            f"this machine {check.reach.detail}",
            "fix identity_file in the hosts file, or create the key there "
            f"(ssh-keygen -t ed25519 -f {shlex.quote(str(key))})",
        )
    if reach is Reach.AUTH_FAILED:
        return Finding(
            Code.SSH_AUTH_FAILED,
            Severity.ERROR,
            host.name,
            f"{target} refused key authentication{detail} (ddptui never uses passwords)",
            f"install your public key there (ssh-copy-id -p {host.port} {login}), or set "
            "identity_file / load the key into ssh-agent",
        )
    if reach is Reach.HOSTKEY_UNKNOWN:
        return Finding(
            Code.HOST_KEY_UNKNOWN,
            Severity.ERROR,
            host.name,
            # The fix says what to run, with the hosts file's path.
            check.reach.detail.removesuffix(TRUST_ADVICE)
            or f"the host key of {host.name} ({host.address}) is not in known_hosts",
            f"run `ddptui trust {shlex.quote(str(config.path))}` to review its fingerprint and "
            "accept it",
        )
    if reach is Reach.HOSTKEY_CHANGED:
        # known_hosts names a host on a non-standard port as [address]:port.
        entry = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
        # Without -f, ssh-keygen edits ~/.ssh/known_hosts, which may not be the file in use.
        file = f" -f {shlex.quote(str(host.known_hosts))}" if host.known_hosts is not None else ""
        return Finding(
            Code.HOST_KEY_CHANGED,
            Severity.ERROR,
            host.name,
            f"the host key of {host.name} ({host.address}) differs from the one in known_hosts"
            f"{detail}: a reinstalled machine, or someone in the middle",
            "confirm the new key with the machine's administrator, then remove the old one "
            f"(ssh-keygen -R {shlex.quote(entry)}{file}, or the lines named above) and run "
            "`ddptui trust`",
        )
    if reach is Reach.HOSTKEY_REVOKED:
        return Finding(
            Code.HOST_KEY_REVOKED,
            Severity.ERROR,
            host.name,
            f"the host key of {host.name} ({host.address}) is revoked in known_hosts{detail}",
            "a revoked key is never accepted: get the host's new key from its administrator "
            "and remove the @revoked line only if the key really is safe again",
        )
    if reach is Reach.PYTHON_MISSING:
        return Finding(
            Code.PYTHON_MISSING,
            Severity.ERROR,
            host.name,
            f"{host.python} does not run on {host.name}{detail}",
            f"install Python 3.8 or newer there, or set python (or conda_env) for {host.name}",
        )
    why = {
        Reach.DNS_FAILED: ("its address does not resolve", "check the address in the hosts file"),
        Reach.REFUSED: (
            f"nothing accepts SSH on port {host.port}",
            "start sshd there, or set the host's port",
        ),
        Reach.TIMEOUT: (
            f"no answer within {config.cluster.connect_timeout:g} s",
            "check the address, routing and firewalls, or raise cluster.connect_timeout",
        ),
    }
    if reach not in why:
        return Finding(
            Code.HOST_UNREACHABLE,
            Severity.ERROR,
            host.name,
            f"checking {host.name} ({target}) failed{detail}",
            f"try `ssh -p {host.port} {login}` to see the full error",
        )
    reason, fix = why[reach]
    return Finding(
        Code.HOST_UNREACHABLE,
        Severity.ERROR,
        host.name,
        # The remote layer's detail already says why in full; the reason is the fallback.
        f"{host.name} ({target}) is unreachable: {check.reach.detail or reason}",
        fix,
    )


def _torch_findings(config: Config, host: HostConfig, facts: HostFacts) -> Iterator[Finding]:
    torch = facts.torch
    python = facts.python.executable if facts.python.executable is not NA else host.python
    # The host reported this path: quoted, it cannot smuggle a command into a pasted fix.
    quoted = shlex.quote(python)
    if torch.status == "missing":
        yield Finding(
            Code.TORCH_MISSING,
            Severity.ERROR,
            host.name,
            f"torch is not installed for {python} on {host.name}",
            f"install it into that interpreter ({quoted} -m pip install torch, matching the "
            "other hosts), or point python / conda_env at the environment that has it",
        )
    elif torch.status == "timeout":
        yield Finding(
            Code.TORCH_IMPORT_TIMEOUT,
            Severity.ERROR,
            host.name,
            f"import torch did not finish within {config.cluster.torch_import_timeout:g} s "
            f"on {host.name}",
            f"run `{quoted} -c 'import torch'` there: a hung GPU driver or a slow network "
            "file system is the usual cause; where it is only slow, raise "
            "cluster.torch_import_timeout",
        )
    elif torch.status == "error":
        yield Finding(
            Code.TORCH_BROKEN,
            Severity.ERROR,
            host.name,
            f"import torch fails on {host.name}: {torch.detail}",
            f"reinstall torch for {python}; the error names the missing piece",
        )


def _process_findings(config: Config, host: HostConfig, facts: HostFacts) -> Iterator[Finding]:
    nproc = procs_per_node(config, host, facts)
    memory, cpus = facts.memory_total_bytes, facts.cpu_count
    available = facts.memory_available_bytes
    given = config.job.memory_per_process_gb
    each = RANK_MEMORY_BYTES if given is None else given * BYTES_PER_GB
    why = (
        f"a rank with torch loaded takes about {RANK_MEMORY_BYTES / 2**20:.0f} MiB"
        if given is None
        else f"job.memory_per_process_gb = {given:g}"
    )
    needed = nproc * each
    if memory is not NA and memory > 0 and needed > MEMORY_SHARE * memory:
        yield Finding(
            Code.NPROC_OVER_MEMORY,
            Severity.ERROR,
            host.name,
            f"{nproc} processes on {host.name} need about {_gb(needed)} GB of memory ({why}), "
            f"and it has {_gb(memory)} GB",
            f"lower job.nproc_per_node to {max(1, int(MEMORY_SHARE * memory // each))} or less",
        )
    elif available is not NA and memory is not NA and 0 <= available < needed:
        yield Finding(
            Code.NPROC_OVER_FREE_MEMORY,
            Severity.WARNING,
            host.name,
            f"{nproc} processes on {host.name} need about {_gb(needed)} GB of memory ({why}), "
            f"and only {_gb(available)} of its {_gb(memory)} GB is available now: other "
            "processes hold the rest, and the ranks would swap or be killed",
            f"free memory on {host.name} (`ps aux --sort=-rss | head` there names what holds "
            f"it), or lower job.nproc_per_node to {max(1, int(available // each))} or less",
        )
    elif cpus is not NA and cpus > 0 and nproc > cpus and not present_gpus(facts):
        yield Finding(
            Code.NPROC_OVER_CPUS,
            Severity.WARNING,
            host.name,
            f"{nproc} processes on {host.name}'s {cpus} CPU(s): ranks that compute on the CPU "
            "take turns for them, and every step waits for the slowest",
            f"set job.nproc_per_node to {cpus} or less",
        )


def _gb(size: float) -> str:
    gigabytes = size / BYTES_PER_GB
    return f"{gigabytes:.1f}" if gigabytes < 10 else f"{gigabytes:.0f}"


def _shared_workdir(check: HostCheck, facts: HostFacts) -> Finding:
    where = facts.disk.path if isinstance(facts.disk.path, str) else check.host.workdir
    others = len(check.workdir_shared_with)
    return Finding(
        Code.WORKDIR_SHARED,
        Severity.INFO,
        check.host.name,
        f"the workdir {where} on {check.host.name} is on storage that {others} other host(s) "
        "share (an NFS home, say): each node keeps its part of a run in a directory of its own",
        "nothing to do; checkpoint files your code writes there need no copying between hosts "
        "that share it",
    )


def _disk_findings(config: Config, host: HostConfig, facts: HostFacts) -> Iterator[Finding]:
    free = facts.disk.free_bytes
    minimum = config.cluster.min_free_disk_gb
    if free is NA or free >= minimum * BYTES_PER_GB:
        return
    yield Finding(
        Code.LOW_DISK,
        Severity.ERROR,
        host.name,
        f"only {free / BYTES_PER_GB:.1f} GB free at {facts.disk.checked_path} on {host.name} "
        f"(the workdir needs {minimum:g} GB for checkpoints and logs)",
        "free space there, point workdir at a larger disk, or lower cluster.min_free_disk_gb",
    )
