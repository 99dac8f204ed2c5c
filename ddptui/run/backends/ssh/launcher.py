"""Starting an SSH run's attempts: the record a plan makes, staging the code, starting every
node.

The supervisor (:mod:`ddptui.run.supervisor`) calls these and records each step; nothing here
writes the run record. Nothing here waits for the training either: once every node's torchrun
is started (in its own session, stdio in files), the run goes on whatever happens to the
supervisor or its SSH connections.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
import time
from collections.abc import Callable, Mapping, Sequence

from ddptui.check import CheckReport
from ddptui.config.model import AUTO, Config
from ddptui.errors import DdptuiError
from ddptui.layout import TRAINER_CHECKPOINTS, code_cache_dir, code_dir, log_dir
from ddptui.plan.launch import LaunchPlan, NodeLaunch, torchrun_flag
from ddptui.remote.commands import python_argv
from ddptui.remote.connection import RemoteCluster
from ddptui.remote.transport import RemoteError, Transport
from ddptui.run.agent import client as nodes
from ddptui.run.agent.call import NodeError, described
from ddptui.run.checkpoints import (
    LIKELY_CHECKPOINTS,
    RECEIVE,
    SEND,
    Copy,
    Held,
    Refused,
    only_on_node_0,
    plan_copies,
    unmatched,
)
from ddptui.run.code import upload as code_upload
from ddptui.run.code.contents import MIB, CodeError, job_code, mib
from ddptui.run.record import NodeRecord, RunRecord, RunState, node_versions
from ddptui.run.stopper import StopReport, live, terminate
from ddptui.run.timeline import Timeline
from ddptui.untrusted import plain

Say = Callable[[str], None]
"""Progress for people: one short line per step (hosts staged, nodes started…)."""
Reached = Callable[[str, str], None]
"""A host reached a stage of the launch timeline (:mod:`ddptui.run.timeline`)."""


class LaunchError(DdptuiError):
    """The attempt could not start; nothing of it is left running."""


class CheckpointFilesError(LaunchError):
    """``[job] checkpoint_files`` names what no node holds: the hosts file needs a change."""

    exit_code = 2


def new_record(
    config: Config,
    report: CheckReport,
    plan: LaunchPlan,
    *,
    demo: bool = False,
    began: float | None = None,
) -> RunRecord:
    """The record of a run about to be staged: the plan's hosts, ranks, commands, what the
    check found of each host's stack, and its launch timeline from ``began`` (default: when
    the check began)."""
    record = RunRecord(
        id=plan.run_id,
        created=time.time(),
        hosts_file=str(config.path),
        entry=plan.entry,
        backend=plan.backend,
        master_addr=plan.master_addr,
        world_size=plan.world_size,
        args=list(plan.args),
        nodes=[node_record(node, report) for node in plan.nodes],
        demo=demo,
        loss_pattern=config.job.loss_pattern,
        timelines=[checked_timeline(report, began)],
    )
    record.transition(RunState.STAGING, f"uploading the code to {len(plan.nodes)} host(s)")
    return record


def node_record(node: NodeLaunch, report: CheckReport) -> NodeRecord:
    """The record of one node as ``node`` plans it, with what ``report`` found of its host."""
    check = next((check for check in report.checks if check.host.name == node.host.name), None)
    return NodeRecord(
        host=node.host.name,
        address=node.host.address,
        node_rank=node.node_rank,
        nproc=node.nproc,
        run_dir=node.run_dir,
        argv=list(node.argv),
        env=dict(node.env),
        versions=node_versions(check.facts if check is not None else None),
        clock_offset_s=check.clock_offset_s if check is not None else None,
    )


def checked_timeline(report: CheckReport, began: float | None = None) -> Timeline:
    """A first attempt's timeline from ``began`` as far as its check took it: each host
    connected and probed, and the whole check done (a check done before ``began``, as the
    console's, took no time of the launch)."""
    checking = report.began_at or time.time()
    timeline = Timeline(1, checking if began is None else began)
    checked = checking + report.elapsed_s
    for check in report.checks:
        timeline.stamp(check.host.name, "checking", checking)
        if check.connected_at is not None:
            timeline.stamp(check.host.name, "connected", check.connected_at)
        if check.probed_at is not None:
            timeline.stamp(check.host.name, "probed", check.probed_at)
        timeline.stamp(check.host.name, "checked", checked)
    return timeline


async def stage(
    remote: Transport,
    config: Config,
    record: RunRecord,
    *,
    say: Say,
    reached: Reached = lambda host, stage: None,
    only: Sequence[NodeRecord] | None = None,
) -> None:
    """Upload the code to every node's run directory (``only``: to these of the run's nodes:
    the spares a recovery put in; only what the host's cache lacks; each file verified by
    checksum, the directory renamed into place) with a copy of the record;
    :class:`LaunchError` naming the hosts that failed."""
    staged = record.nodes if only is None else only
    try:
        tree = job_code(config.job)
    except CodeError as error:
        raise LaunchError(f"staging failed: {error}") from None
    say(f"staging {len(tree.files)} file(s), {mib(tree.size)}, on {len(staged)} host(s)")
    sent: dict[str, int] = {}
    shared: list[str] = []
    text = record.to_toml()

    async def one(node: NodeRecord) -> None:
        host = config.host(node.host)
        cache = code_cache_dir(node.run_dir)
        sent[node.host], was_staged = await code_upload.send(
            remote, host, cache, node.run_dir, tree, text
        )
        if was_staged:
            shared.append(node.host)
        reached(node.host, "staged")

    results = await asyncio.gather(*(one(node) for node in staged), return_exceptions=True)
    failed = _failures(staged, results)
    if failed:
        raise LaunchError(f"staging failed: {'; '.join(failed.values())}")
    total = sum(sent.values())
    unchanged = sorted(host for host, size in sent.items() if not size)
    line = f"staged: sent {mib(total)}"
    if unchanged:
        line += f"; {', '.join(unchanged)} had every file already"
    if shared:
        line += f"; {', '.join(sorted(shared))} found it staged by a host sharing the workdir"
    say(line)


def _failures(asked: Sequence[NodeRecord], results: Sequence[object]) -> dict[str, str]:
    """Host → what went wrong there, from a gather over ``asked`` (``return_exceptions``):
    each host's failure is its own, whatever it raised."""
    failed = {}
    for node, result in zip(asked, results, strict=True):
        if isinstance(result, Exception):
            failed[node.host] = described(node.host, result)
        elif isinstance(result, BaseException):
            raise result
    return failed


async def master_port(remote: Transport, config: Config, record: RunRecord) -> int:
    """The port this attempt's rendezvous uses: ``[cluster] master_port`` if it is free on
    node 0 now, or any free port there when it is ``"auto"``."""
    wanted = 0 if config.cluster.master_port == AUTO else int(config.cluster.master_port)
    try:
        return await nodes.free_port(remote, config.host(record.head.host), wanted)
    except NodeError as error:
        raise LaunchError(
            f'{error}; choose another cluster.master_port, or set it to "auto"'
            if wanted
            else str(error)
        ) from None


async def end_leftovers(remote: Transport, config: Config, record: RunRecord, *, say: Say) -> None:
    """End what earlier attempts left running (a host cut off while the others stopped), so a
    new attempt starts alone; :class:`LaunchError` when a host cannot be asked (or answers
    garbage) or cleared."""
    report = StopReport()
    leftovers = await live(remote, config, record, report)
    if report.unreachable or report.garbled:
        raise LaunchError(f"cannot start a new attempt: {'; '.join(report.lines())}")
    if leftovers:
        say(f"ending what earlier attempts left on {', '.join(sorted(leftovers))}")
        await terminate(remote, config, record, grace=5.0, report=report)
        if not report.clean:
            raise LaunchError(
                "what earlier attempts left could not be ended: " + "; ".join(report.lines())
            )


COPY_RATE = 20 * MIB
"""Bytes a second a checkpoint copy through this machine is given at least, over a minute."""
REFUSALS_SAID = 5
"""Refused copies named one a line; a host that offers a thousand is not given a thousand."""


async def carry_checkpoints(
    remote: RemoteCluster, config: Config, record: RunRecord, *, say: Say
) -> None:
    """Before a resume of a user's script: copy ``[job] checkpoint_files`` to every node that
    lacks node 0's copy (and say what was copied, and what a host offered that was refused:
    :mod:`ddptui.run.checkpoints`), or, without the key, warn when node 0 holds
    checkpoint-like files that some node lacks. :class:`LaunchError` when a glob of the key
    matches nothing on any node, a node cannot list (or lists what it could not hold), the
    run's code cannot be read here, or a copy fails."""
    if record.entry == "trainer":
        return
    globs = config.job.checkpoint_files or LIKELY_CHECKPOINTS
    listed = await asyncio.gather(
        *(
            nodes.list_files(remote, config.host(node.host), code_dir(node.run_dir), globs)
            for node in record.nodes
        ),
        return_exceptions=True,
    )
    failed = _failures(record.nodes, listed)
    if failed:
        raise LaunchError(f"cannot look for checkpoint files: {'; '.join(failed.values())}")
    matched = {
        node.node_rank: found
        for node, found in zip(record.nodes, listed, strict=True)
        if isinstance(found, dict)
    }
    held = {
        rank: {path: file for files in found.values() for path, file in files.items()}
        for rank, found in matched.items()
    }
    if not config.job.checkpoint_files:
        alone = [_shown(path) for path in only_on_node_0(held)]
        if alone:
            named = ", ".join(alone[:3]) + (f" and {len(alone) - 3} more" if len(alone) > 3 else "")
            say(
                f"warning: {named} exist(s) on node 0 only: the other ranks would start from "
                f'scratch. Set [job] checkpoint_files = ["{alone[0]}"] to copy it on resume'
            )
        return
    missing = unmatched(globs, matched)
    if missing:
        raise CheckpointFilesError(
            f"[job] checkpoint_files: {missing[0]!r} matches no file on any node, so there is "
            "nothing to resume from; check the name (relative to the script's directory)"
        )
    plan = plan_copies(
        held,
        staged=_staged_paths(config),
        latest=time.time() + config.cluster.max_clock_skew_s,
    )
    by_rank = {node.node_rank: node for node in record.nodes}
    for line in _refusals(plan.refused, by_rank):
        say(line)
    for copy in plan.copies:
        source = by_rank[copy.source]
        for target in (by_rank[rank] for rank in copy.targets):
            await _copy(remote, config, copy, source, target)
        targets = ", ".join(f"{by_rank[rank].host}" for rank in copy.targets)
        say(f"copied {_shown(copy.path)} ({mib(copy.held.size)}) from {source.host} to {targets}")


def _staged_paths(config: Config) -> set[str]:
    """The paths of the run's code, as a launch of ``config`` stages it now.

    The record keeps no manifest, and a resume stages nothing; this is what the launch uploaded
    unless the job's directory changed since (a file deleted here since is not among them).
    """
    try:
        return {file.path for file in job_code(config.job).files}
    except CodeError as error:
        raise LaunchError(
            f"cannot tell the run's code from its checkpoints, to never copy over it: {error}"
        ) from None


def _refusals(refused: Sequence[Refused], by_rank: Mapping[int, NodeRecord]) -> list[str]:
    lines = [
        f"warning: not copying {_shown(each.path)} from {by_rank[each.source].host} to "
        f"{', '.join(by_rank[rank].host for rank in each.targets)}: {each.why}"
        for each in refused[:REFUSALS_SAID]
    ]
    if len(refused) > REFUSALS_SAID:
        lines.append(f"warning: and {len(refused) - REFUSALS_SAID} more file(s) not copied")
    return lines


def _shown(path: str) -> str:
    """A path a host listed, to show."""
    return plain(path, limit=200, one_line=True)


async def carry_to_new_head(
    remote: RemoteCluster,
    config: Config,
    record: RunRecord,
    old: NodeRecord,
    new: NodeRecord,
    *,
    say: Say,
) -> None:
    """Node 0 replaced (a spare in its place, or the next node moved up) while it still
    answers: what the resume starts from, copied from it to the new node 0. The bundled
    trainer's checkpoints (only node 0 keeps them), or the files of a script's ``[job]
    checkpoint_files``, planned as a resume's carry-over plans them (never over the run's
    code, never a module). :class:`LaunchError` when they cannot be listed or a copy fails."""
    if record.entry == "trainer":
        source, target = old.run_dir, new.run_dir
        globs: Sequence[str] = (f"{TRAINER_CHECKPOINTS}/*",)
        staged: set[str] = set()
    else:
        source, target = code_dir(old.run_dir), code_dir(new.run_dir)
        globs = config.job.checkpoint_files or LIKELY_CHECKPOINTS
        staged = _staged_paths(config)
    try:
        listed = await nodes.list_files(remote, config.host(old.host), source, globs)
    except NodeError as error:
        raise LaunchError(f"cannot list node 0's checkpoints: {error}") from None
    held = {path: file for files in listed.values() for path, file in files.items()}
    plan = plan_copies(
        {0: held, 1: {}}, staged=staged, latest=time.time() + config.cluster.max_clock_skew_s
    )
    by_rank = {0: old, 1: new}
    for line in _refusals(plan.refused, by_rank):
        say(line)
    for copy in plan.copies:
        await _copy(remote, config, copy, old, new, (source, target))
    size = sum(copy.held.size for copy in plan.copies)
    say(
        f"copied {len(plan.copies)} checkpoint file(s) ({mib(size)}) from {old.host} to "
        f"{new.host}, node 0 now"
    )


TRAINER_MANIFEST = re.compile(rf"{TRAINER_CHECKPOINTS}/ckpt-(\d{{9}})\.json")
"""A bundled trainer's checkpoint manifest, named by its step; its state file is beside it."""


async def carry_from_peers(
    remote: RemoteCluster,
    config: Config,
    peers: Sequence[NodeRecord],
    new: NodeRecord,
    *,
    say: Say,
) -> None:
    """Node 0 replaced while it no longer answers, the bundled trainer's checkpoints gone with
    it: the newest checkpoint another node of the run holds (a rescue its ranks wrote as the
    attempt failed: ``trainer/rescue.py``) copied to the new node 0, state file first.

    A node is heard about itself only: its listing names a manifest and a state file in its
    own checkpoints directory, or nothing is taken from it; the copy is checksummed end to end,
    and the trainer verifies the manifest before it loads. The trainer loads a checkpoint as
    weights only (``torch.load(weights_only=True)``), so what a node hands on here can shape
    the model's weights, as its ranks' gradients already do under DDP, and run no code.
    :class:`LaunchError` when no node answers with one, or a copy fails."""
    newest: tuple[int, NodeRecord, str, dict[str, Held]] | None = None
    for peer in peers:
        try:
            listed = await nodes.list_files(
                remote, config.host(peer.host), peer.run_dir, (f"{TRAINER_CHECKPOINTS}/ckpt-*",)
            )
        except NodeError as error:
            say(f"cannot list {peer.host}'s checkpoints: {error}")
            continue
        held = {path: file for files in listed.values() for path, file in files.items()}
        for path in held:
            found = TRAINER_MANIFEST.fullmatch(path)
            state = path.removesuffix(".json") + ".pt"
            if found and state in held and (newest is None or int(found.group(1)) > newest[0]):
                newest = (int(found.group(1)), peer, path, held)
    if newest is None:
        raise LaunchError(
            "node 0 does not answer, and no other node of the run holds a checkpoint to "
            "resume from (each writes a rescue as an attempt fails, on the CPU only)"
        )
    step, peer, manifest, held = newest
    state = manifest.removesuffix(".json") + ".pt"
    latest = time.time() + config.cluster.max_clock_skew_s
    directories = (peer.run_dir, new.run_dir)
    for path in (state, manifest):
        file = Held(held[path].size, min(held[path].mtime, latest))
        await _copy(remote, config, Copy(path, 0, (1,), file), peer, new, directories)
    say(
        f"node 0 does not answer: copied the checkpoint of step {step} ({mib(held[state].size)}) "
        f"from {peer.host} to {new.host}, node 0 now"
    )


async def _copy(
    remote: RemoteCluster,
    config: Config,
    copy: Copy,
    source: NodeRecord,
    target: NodeRecord,
    directories: tuple[str, str] | None = None,
) -> None:
    """``copy`` from ``source`` to ``target``, its path relative to each one's code directory,
    or to ``directories`` (the source's, the target's)."""
    from_dir, to_dir = directories or (code_dir(source.run_dir), code_dir(target.run_dir))
    origin = posixpath.join(from_dir, copy.path)
    destination = posixpath.join(to_dir, copy.path)
    sending, receiving = config.host(source.host), config.host(target.host)
    try:
        result = await remote.relay(
            sending,
            python_argv(sending, "-c", SEND, origin),
            receiving,
            python_argv(
                receiving, "-c", RECEIVE, destination, str(copy.held.size), str(copy.held.mtime)
            ),
            timeout=60.0 + copy.held.size / COPY_RATE,
        )
    except RemoteError as error:
        raise LaunchError(f"copying {_shown(copy.path)}: {error}") from None
    if result.exit_status != 0:
        why = plain(result.stdout.strip() or result.stderr.strip(), limit=300, one_line=True)
        raise LaunchError(
            f"copying {_shown(copy.path)} from {source.host} to {target.host} failed: {why}"
        )


async def start_attempt(
    remote: Transport,
    config: Config,
    record: RunRecord,
    attempt: int,
    port: int,
    *,
    say: Say,
    extra_args: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
    reached: Reached = lambda host, stage: None,
) -> None:
    """Start attempt ``attempt`` on every node at once; on any failure kill the run's processes
    on every node and raise :class:`LaunchError` naming the hosts that failed.

    ``extra_args`` follow the recorded command (a resume's ``--resume latest``); ``extra_env``
    goes over the recorded environment (``--debug``).
    """
    say(f"starting attempt {attempt} on {len(record.nodes)} host(s), master port {port}")

    async def one(node: NodeRecord) -> None:
        await nodes.start(
            remote,
            config.host(node.host),
            node.run_dir,
            attempt,
            {**node.env, **(extra_env or {})},
            [*attempt_argv(node.argv, node.run_dir, attempt, port), *extra_args],
        )
        reached(node.host, "started")

    results = await asyncio.gather(*(one(node) for node in record.nodes), return_exceptions=True)
    failed = _failures(record.nodes, results)
    if failed:
        # Every node, not only those that said they started: one whose answer was lost or
        # garbage may have started too, and a signal that reaches nothing costs nothing.
        kills = await asyncio.gather(
            *(
                nodes.send_signal(
                    remote, config.host(node.host), node.run_dir, "KILL", attempts=attempt
                )
                for node in record.nodes
            ),
            return_exceptions=True,
        )
        left = [
            f"{why}; what started there may still run"
            for host, why in _failures(record.nodes, kills).items()
            if host not in failed
        ]
        raise LaunchError(f"start failed: {'; '.join([*failed.values(), *left])}")


def attempt_argv(argv: Sequence[str], run_dir: str, attempt: int, port: int) -> list[str]:
    """The recorded command with this attempt's log directory and master port."""
    updated = torchrun_flag(argv, "--master-port", str(port))
    return torchrun_flag(updated, "--log-dir", log_dir(run_dir, attempt))
