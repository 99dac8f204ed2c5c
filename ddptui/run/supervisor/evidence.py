"""What an attempt's end leaves behind for whoever asks why: the words of a stop (of a start cut
short, of a hung run's), the ranks' flight recorders after a failure, every rank's stacks at a
hang."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Collection, Mapping

from ddptui.atomic import make_dirs, write_atomic
from ddptui.layout import RunFiles
from ddptui.remote.transport import Transport
from ddptui.run import protocol
from ddptui.run.backends import RunBackend
from ddptui.run.evidence.kept import save as save_dump
from ddptui.run.following.state import Hang, Judgement
from ddptui.run.record import RunRecord, RunState
from ddptui.run.stopper import StopReport
from ddptui.run.supervisor.viewers import Audience, Viewer

log = logging.getLogger("ddptui.supervisor")


def stop_words(record: RunRecord, report: StopReport, was: RunState) -> str:
    if was.final:
        stays = f"run {record.id} stays {was.value}"
        if report.clean:
            return f"{stays}; nothing of it is left running"
        return f"{stays}; not everything could be confirmed gone"
    if not report.clean:
        return f"run {record.id} recorded as stopped, but not everything could be confirmed gone"
    return f"run {record.id} stopped in {report.seconds:.1f} s; nothing of it is left running"


def stop_data(report: StopReport, was: RunState) -> dict[str, object]:
    return {
        "lines": report.lines(),
        "clean": report.clean,
        "graceful": report.graceful,
        "seconds": report.seconds,
        "was": was.value,
    }


def interrupted_words(was: RunState) -> str:
    """Why a start cut short (``was`` staging or starting) failed: its supervisor ended
    first."""
    cut = "staging" if was is RunState.STAGING else "start"
    return (
        f"the {cut} was interrupted: its supervisor ended before every node had started; "
        "resume to start it again"
    )


def hung_words(hang: Hang, summary: str, stacks: str) -> str:
    """A hung attempt, stopped as ``on_hang`` says: where it hung, the hang's ``summary`` and
    where its ``stacks`` were kept (or "")."""
    where = f"at step {hang.step}" if hang.step is not None else "before the first step"
    return f"hung {where}: {summary}" + (f"; {stacks}" if stacks else "")


async def keep_flight_recorders(
    backend: RunBackend,
    files: RunFiles,
    silent: Collection[str],
    followed: Mapping[str, Transport],
) -> str | None:
    """After a failure, the ranks' flight-recorder dumps (written by NCCL's watchdog on a
    timeout, or by the trainer on a failed collective) to the head, read, but for the
    ``silent`` hosts': what to add to the attempt's detail, or None. Evidence lost is said;
    it never keeps the run from being concluded."""
    try:
        taken = await backend.take_stacks(silent, followed)
        saved = save_dump(taken, files.dumps) if taken.flight_dumps else None
    except Exception as error:
        log.exception("the flight recorders could not be kept")
        return f"the flight recorders could not be kept: {type(error).__name__}"
    if saved is None:
        return None
    said = "; ".join(finding.text for finding in saved.flight) or "nothing odd in them"
    kept = f"flight recorders kept in {saved.saved_in}: {said}"
    log.warning("%s", kept)
    return kept


async def keep_hang(
    backend: RunBackend,
    files: RunFiles,
    judgement: Judgement,
    now: float,
    followed: Mapping[str, Transport],
) -> str:
    """What a hang looks like, kept before anything can end it: the judgement and every rank's
    stacks, as ``evidence/hang-<time>.json``; what to add to the attempt's detail."""
    saved = save_dump(await backend.take_stacks((), followed), files.dumps)
    make_dirs(files.evidence)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    evidence = {**protocol.judgement_document(judgement), "stacks": saved.document()}
    path = files.evidence / f"hang-{stamp}.json"
    write_atomic(path, json.dumps(evidence, indent=2))
    log.warning("hung: every rank's stacks kept in %s", saved.saved_in)
    return f"every rank's stacks at the hang: {saved.saved_in}"


class AskedDumps:
    """Every rank's stacks as a viewer asks (``ddptui dump``, the console's ``D``), taken
    beside the jobs (a dump is most wanted while a start or a stop hangs) through the
    followers' open connections, kept in the run's store; the viewer is answered with the
    folder's name. Those asked while one is taken share it."""

    def __init__(
        self,
        backend: RunBackend,
        files: RunFiles,
        audience: Audience,
        followed: Callable[[], Mapping[str, Transport]],
    ) -> None:
        self._backend = backend
        self._files = files
        self._audience = audience
        self._followed = followed
        self._taking: asyncio.Task[str] | None = None
        self._answering: set[asyncio.Task[None]] = set()

    def ask(self, viewer: Viewer, request: str) -> None:
        if self._taking is None or self._taking.done():
            self._taking = asyncio.create_task(self._take())
        answering = asyncio.create_task(self._answer(self._taking, viewer, request))
        self._answering.add(answering)
        answering.add_done_callback(self._answering.discard)

    async def _take(self) -> str:
        taken = await self._backend.take_stacks((), self._followed(), own_connections=True)
        saved = save_dump(taken, self._files.dumps)
        assert saved.saved_in is not None
        return saved.saved_in.name

    async def _answer(self, taking: asyncio.Task[str], viewer: Viewer, request: str) -> None:
        try:
            kept = await asyncio.shield(taking)
        except Exception as error:  # a bug: the viewer is told, the supervisor goes on
            log.exception("a dump failed")
            self._audience.reply(viewer, request, False, f"the dump failed: {error}")
        else:
            self._audience.reply(viewer, request, True, "", {"kept": kept})
