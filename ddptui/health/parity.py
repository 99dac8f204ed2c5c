"""Version parity across hosts: the odd host out for each version and each installed package."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from ddptui.config.model import HostConfig
from ddptui.health.findings import Code, Finding, Severity
from ddptui.health.wording import hosts_list, plural
from ddptui.probe.facts import NA, HostFacts, Maybe

NOT_INSTALLED = "not installed"
MAX_LISTED_PACKAGES = 8
FRAMEWORKS = ("lightning", "pytorch-lightning", "transformers", "accelerate", "deepspeed")
"""The training frameworks a script's behaviour hangs on: a drift in one is named before the
others (which are often only its dependencies)."""


@dataclass(frozen=True)
class ParityRow:
    """One compared fact: every host's value, the reference value and the hosts that differ."""

    key: str
    label: str
    values: Mapping[str, Maybe[str]]
    """Host name → value, in node-rank order. ``NA`` values are never compared, nor a CPU
    host's torch CUDA build ("cpu")."""
    reference: Maybe[str]
    """The majority value; on a tie, node 0's (or the first tied host's)."""
    odd_hosts: tuple[str, ...]


def _torch_release(facts: HostFacts) -> Maybe[str]:
    # "2.4.1+cu121" → "2.4.1": the build tag is compared in its own row, so a CPU host's
    # "+cpu" is not reported twice.
    version = facts.torch.version
    return version if version is NA else version.split("+", 1)[0]


def _cuda_build(facts: HostFacts) -> Maybe[str]:
    build = facts.torch.cuda_build
    return "cpu" if build is None else build


def _has_gpus(facts: HostFacts) -> bool:
    return bool(facts.gpus.devices)


@dataclass(frozen=True)
class _Fact:
    key: str
    label: str
    read: Callable[[HostFacts], Maybe[str]]
    code: Code
    severity: Severity
    hint: str
    compared: Callable[[HostFacts], bool] = lambda facts: True
    """Hosts for which the fact must agree; the others are shown but never odd."""


_FACTS = (
    _Fact(
        "driver",
        "NVIDIA driver",
        lambda facts: facts.gpus.driver_version,
        Code.DRIVER_MISMATCH,
        Severity.WARNING,
        "install the same NVIDIA driver on every host (mixed drivers work, until they do not)",
    ),
    _Fact(
        "cuda_driver",
        "CUDA driver",
        lambda facts: facts.gpus.cuda_driver_version,
        Code.CUDA_DRIVER_MISMATCH,
        Severity.WARNING,
        "install the same NVIDIA driver everywhere; it must support torch's CUDA build",
    ),
    _Fact(
        "torch",
        "torch",
        _torch_release,
        Code.TORCH_MISMATCH,
        Severity.ERROR,
        "install the same torch on every host; ranks on different versions can hang or "
        "disagree on collectives",
    ),
    _Fact(
        "torch_cuda",
        "torch CUDA build",
        _cuda_build,
        Code.TORCH_CUDA_MISMATCH,
        Severity.ERROR,
        "install the same torch build (same --index-url, e.g. cu124) on every GPU host",
        compared=_has_gpus,
    ),
    _Fact(
        "nccl",
        "NCCL",
        lambda facts: facts.torch.nccl_version,
        Code.NCCL_MISMATCH,
        Severity.ERROR,
        "install the same torch build everywhere; NCCL versions must match across ranks",
    ),
    _Fact(
        "python",
        "Python",
        lambda facts: facts.python.version,
        Code.PYTHON_MISMATCH,
        Severity.WARNING,
        "use the same Python on every host (set python or conda_env per host)",
    ),
)


def odd_ones_out(values: Mapping[str, Maybe[str]]) -> tuple[Maybe[str], tuple[str, ...]]:
    """The reference value and the hosts that differ from it, ``values`` in node-rank order.

    The reference is the most common value; among tied values, the first host's (node 0's).
    """
    counts = Counter(value for value in values.values() if value is not NA)
    if not counts:
        return NA, ()
    top = max(counts.values())
    reference = next(v for v in values.values() if v is not NA and counts[v] == top)
    odd = tuple(host for host, value in values.items() if value is not NA and value != reference)
    return reference, odd


def parity_rows(probed: Sequence[tuple[HostConfig, HostFacts]]) -> list[ParityRow]:
    """The parity grid: one row per compared version, hosts in the order given (node 0 first)."""
    rows = []
    for fact in _FACTS:
        values = {host.name: fact.read(facts) for host, facts in probed}
        reference, odd = odd_ones_out(
            {host.name: values[host.name] for host, facts in probed if fact.compared(facts)}
        )
        rows.append(ParityRow(fact.key, fact.label, values, reference, odd))
    return rows


def parity_findings(probed: Sequence[tuple[HostConfig, HostFacts]]) -> Iterator[Finding]:
    for fact, row in zip(_FACTS, parity_rows(probed), strict=True):
        for name in row.odd_hosts:
            agreeing = [host for host, value in row.values.items() if value == row.reference]
            yield Finding(
                fact.code,
                fact.severity,
                name,
                f"{name} has {fact.label} {row.values[name]}; "
                f"{hosts_list(agreeing)} {'has' if len(agreeing) == 1 else 'have'} {row.reference}",
                fact.hint,
            )


def package_findings(probed: Sequence[tuple[HostConfig, HostFacts]]) -> Iterator[Finding]:
    pip = {host.name: facts.pip_packages for host, facts in probed}
    yield from _drift(Code.PACKAGE_DRIFT, "pip", pip, {host.name: host for host, _ in probed})
    conda: dict[str, Maybe[Mapping[str, str]]] = {}
    for host, facts in probed:
        if facts.conda_packages is None or facts.conda_packages is NA:
            continue
        # Python packages installed by conda also show in pip's list; report them once.
        seen = facts.pip_packages if facts.pip_packages is not NA else {}
        conda[host.name] = {k: v for k, v in facts.conda_packages.items() if k not in seen}
    yield from _drift(Code.CONDA_PACKAGE_DRIFT, "conda", conda, {h.name: h for h, _ in probed})


def _drift(
    code: Code,
    kind: str,
    installed: Mapping[str, Maybe[Mapping[str, str]]],
    hosts: Mapping[str, HostConfig],
) -> Iterator[Finding]:
    known = {name: packages for name, packages in installed.items() if packages is not NA}
    if len(known) < 2:
        return
    differences: dict[str, list[tuple[str, str, Maybe[str]]]] = {name: [] for name in known}
    for package in sorted(set().union(*known.values()), key=_framework_first):
        values: dict[str, Maybe[str]] = {
            name: packages.get(package, NOT_INSTALLED) for name, packages in known.items()
        }
        reference, odd = odd_ones_out(values)
        for name in odd:
            differences[name].append((package, str(values[name]), reference))
    for name, found in differences.items():
        if found:
            yield _drift_finding(code, kind, hosts[name], found)


def _framework_first(package: str) -> tuple[bool, str]:
    normalised = package.lower().replace("_", "-")
    return normalised not in FRAMEWORKS, normalised


def _capped(items: Sequence[str]) -> list[str]:
    if len(items) <= MAX_LISTED_PACKAGES:
        return list(items)
    return [*items[:MAX_LISTED_PACKAGES], f"… {len(items) - MAX_LISTED_PACKAGES} more"]


def _drift_finding(
    code: Code, kind: str, host: HostConfig, found: Sequence[tuple[str, str, Maybe[str]]]
) -> Finding:
    listed = [f"{package} {mine} (others: {theirs})" for package, mine, theirs in found]
    if len(listed) > MAX_LISTED_PACKAGES:
        listed = [*listed[:MAX_LISTED_PACKAGES], f"and {len(listed) - MAX_LISTED_PACKAGES} more"]
    installer, pin = (
        (f"{shlex.quote(host.python)} -m pip install", "==")
        if kind == "pip"
        else ("conda install", "=")
    )
    # Package names and versions come from the hosts: quoted, a pasted fix runs nothing else.
    pins = [
        shlex.quote(f"{package}{pin}{theirs}")
        for package, _, theirs in found
        if theirs != NOT_INSTALLED
    ]
    hint = f"{installer} {' '.join(_capped(pins))}" if pins else ""
    extra = [package for package, _, theirs in found if theirs == NOT_INSTALLED]
    if extra:
        hint += (
            f"{'; ' if hint else ''}install {', '.join(_capped(extra))} on the other hosts "
            "or remove them"
        )
    if len(pins) > MAX_LISTED_PACKAGES or len(extra) > MAX_LISTED_PACKAGES:
        hint += " (`ddptui check --json` lists every package)"
    return Finding(
        code,
        Severity.WARNING,
        host.name,
        f"{host.name} differs from the other hosts in {plural(len(found), kind + ' package')}: "
        f"{', '.join(listed)}",
        hint,
    )
