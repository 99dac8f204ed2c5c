"""Runs that heal themselves, on the test bed, under faults on a seeded schedule.

How soon each fault is recorded, how soon every rank steps again, what it costs, and that
nothing is healed that was never broken and nothing is left behind.

The test bed (prefix ``ddpc``, no test's): 3 nodes in the run and a spare (``spare = true``),
``[recovery] mode = "resume"``, one rank a node of the bundled trainer on gloo (the recovery
bed tests' small model), a checkpoint about every ``--checkpoint-s`` seconds (20:
``checkpoint_every`` steps worked out from the step rate of a short calibration run first),
``hang_timeout_s = --hang-timeout-s`` (10, as the bed tests), launched ``--detach`` so that its
supervisor alone follows it. Five fault classes, ``--rounds`` of each (3), on node1 or node2
(node 0 is replaced only while it answers, since it holds the checkpoints: a cut link or a
host killed whole there is given up, as documented; the recovery bed tests cover node 0):

- ``kill``: the node's rank SIGKILLed (the OOM killer);
- ``hang``: the node's rank SIGSTOPped (a rank stuck and silent);
- ``cut``: the node's link cut, iptables DROP both ways (all but loopback) in its namespace;
- ``host``: the node killed whole, every process of it, its sshd too;
- ``checkpoint``: node 0's newest checkpoint truncated to half, the moment after the node's
  rank is SIGKILLed (a truncated checkpoint alone fails nothing: the resume must pass over it).

Each fault sets its host aside and uses the spare, so each round is a run of its own on all
four hosts: launched; its fault injected at a seeded random moment of the checkpoint interval
after its second checkpoint (the interval as that run keeps it), so that the steps redone fall
anywhere from 0 to a whole interval (two for ``checkpoint``); the run followed until the
incident has its first new step; the fault then undone where the run would see it (the link
mended, the host killed whole back as if rebooted, with nothing of the run on it), and the
supervisor's sweep of what the run may have left there waited for; the run trained on until
``--every-s`` seconds (180) after its first step (one fault every 3 minutes), then stopped
(``ddptui stop``); the processes of the run still alive counted on every host (its supervisor,
on the head, is said apart if it outlives the stop by 20 s); the bed restored for the next
round. The rounds' order, hosts and moments are drawn from ``--seed`` and printed first.

Measured per round, from ``ddptui status RUN --json``'s record and the fault's wall time taken
just before it is injected: judged = the first state ``failed`` or ``hung`` − fault; detect =
the incident's ``detected_at`` − fault (the incident is recorded as the attempt is judged
failed or hung, before its other processes are ended); recover = ``first_step_at`` − fault
(every node's first step of the resumed attempt); steps redone (the incident's
``steps_redone``); whether the host blamed is the one faulted. For the whole: the effective
training time ratio, computed here from the trainer's events (node 0's ``events/rank0.jsonl``),
not from what the record may say of it: a round's wall time runs from its first step to the
stop, and what its fault cost is ``first_step_at`` − the time of the step the resume started
from (``checkpoint_step``) in the failed attempt (the work since that checkpoint, thrown away,
and the time until every rank stepped again); the ratio is Σ (wall − cost) ÷ Σ wall over the
rounds. Then the restarts (resumed attempts), the false recoveries (incidents recorded in a run
of ``--quiet-s`` seconds, 600, of the same settings with no fault), and the processes of the
runs (the calibration's and the fault-free one's too) left on any host once their stop
returned.

Targets (2-core bed): a killed rank recorded within 5 s, a lost host within 15 s, a hang within
25 s; fault → first new step within 60 s; effective training time ≥ 0.85 with one fault every
3 minutes; 0 false recoveries; 0 processes left.

Run as root from the repository root: ``.venv/bin/python benchmarks/chaos.py`` (about 65
minutes on 2 cores: 15 rounds of about 3.5 minutes, the 10-minute fault-free run and the
calibration); ``--json FILE`` keeps every number, ``--keep`` the run store (records,
supervisor logs; each round's hosts are emptied for the next). A check of the script itself:
``.venv/bin/python benchmarks/chaos.py --rounds 1 --quiet-s 60`` (about 20 minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.run.bed import (
    Cli,
    kill_supervisors,
    run_pid,
    run_processes,
    supervisors,
    write_hosts,
)
from tests.testbed import TestBed, TestHost, kill_whole, open_firewall, run_on, start_sshd

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PREFIX = "ddpc"
CLASSES = {
    "kill": "rank SIGKILLed",
    "hang": "rank SIGSTOPped",
    "cut": "link cut",
    "host": "host killed whole",
    "checkpoint": "ckpt truncated+kill",
}
DETECT_TARGET_S = {"kill": 5.0, "hang": 25.0, "cut": 15.0, "host": 15.0, "checkpoint": 5.0}
RECOVER_TARGET_S = 60.0
ETTR_TARGET = 0.85
RECOVERY_WAIT_S = 300.0
"""How long a round waits for the resumed attempt's first step before calling it unrecovered."""
SWEEP_WAIT_S = 120.0
"""How long a mended host's leftovers may take to be ended (the sweep tries every 15 s)."""
SUPERVISOR_EXIT_S = 20.0
"""How long a stopped run's supervisor may take to exit before it is said to outlive it."""
AFTER_RECOVERY_S = 10.0
"""Training kept after the first new step at least, for a round whose recovery outlasts
``--every-s``: the stop then meets a run that trains."""


class Bench:
    def __init__(self, bed: TestBed, work: Path, args: argparse.Namespace) -> None:
        self.bed = bed
        self.work = work
        self.args = args
        self.cli = Cli(work / "state")
        self.node0 = bed.hosts[0]
        self.checkpoint_every = 0
        self.period_s = 0.0
        self.calibration_left: list[str] = []
        self.outlived: list[str] = []
        """Runs whose supervisor was still alive :data:`SUPERVISOR_EXIT_S` after the stop."""

    def hosts_file(self, checkpoint_every: int) -> Path:
        # One file for every run, rewritten the same: each launch stands on the check of the
        # one before (a healthy check of the same file from the last 5 minutes), as a user's.
        path = write_hosts(
            self.bed,
            self.work,
            self.bed.hosts[:4],
            job={
                "checkpoint_every": checkpoint_every,
                "hang_timeout_s": self.args.hang_timeout_s,
            },
            host_overrides={self.bed.hosts[3].name: {"spare": True}},
        )
        path.write_text(path.read_text() + '\n[recovery]\nmode = "resume"\n')
        return path

    def launch(self, checkpoint_every: int) -> str:
        launched = self.cli.run("launch", str(self.hosts_file(checkpoint_every)), "--detach")
        if launched.returncode != 0 or not launched.stdout.strip():
            raise SystemExit(f"launch failed:\n{launched.stderr}")
        return launched.stdout.split()[-1]

    def record(self, run_id: str) -> dict[str, Any]:
        """The run's record as the supervisor last wrote it (replaced atomically): read from
        the file, not through ``status``, which costs half a second of CPU a call."""
        return tomllib.loads((self.cli.store / run_id / "run.toml").read_text())

    def status(self, run_id: str) -> dict[str, Any]:
        shown = self.cli.run("status", run_id, "--json")
        if not shown.stdout:
            raise SystemExit(f"status {run_id} said nothing:\n{shown.stderr}")
        document: dict[str, Any] = json.loads(shown.stdout)
        return document

    def attempts(self, run_id: str) -> list[list[dict[str, Any]]]:
        """Node 0's rank 0 events, one list per attempt (each begins with its start event).
        Node 0 is never faulted and keeps node rank 0, so rank 0 is there in every attempt."""
        found: list[list[dict[str, Any]]] = []
        for node in (self.node0.workdir / "runs" / run_id).glob("node*"):
            with contextlib.suppress(FileNotFoundError):
                for line in (node / "events" / "rank0.jsonl").read_text().splitlines():
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue  # the line being written
                    if event.get("type") == "start":
                        found.append([])
                    if found:
                        found[-1].append(event)
        return found

    def first_step(self, run_id: str, timeout: float = 300) -> float:
        """When rank 0 made its first step (every rank steps together under DDP)."""
        found: float = _until(
            "the run's first step",
            lambda: next(
                (e["time"] for a in self.attempts(run_id)[:1] for e in a if e["type"] == "step"),
                None,
            ),
            timeout,
        )
        return found

    def stop(self, run_id: str) -> tuple[int, float]:
        """``ddptui stop`` (checkpoint, then stop): its exit status and seconds."""
        began = time.monotonic()
        stopped = self.cli.run("stop", run_id, timeout=300)
        took = time.monotonic() - began
        if stopped.returncode not in (0, 3):
            print(f"  stop {run_id} exited {stopped.returncode}: {stopped.stderr.strip()[-400:]}")
            self.cli.run("stop", run_id, "--kill", timeout=300)
        return stopped.returncode, took

    def left(self, run_id: str) -> list[str]:
        """The run's processes alive on any host once its stop returned. Its supervisor, on
        the head, is no host's: noted apart if it has not gone within
        :data:`SUPERVISOR_EXIT_S` (one run at a time: any supervisor of the store is this
        run's), as it may by design while a host set aside may hold the run's processes."""
        left = run_processes(self.bed.hosts, run_id)
        deadline = time.monotonic() + SUPERVISOR_EXIT_S
        while (alive := supervisors(self.cli.store)) and time.monotonic() < deadline:
            time.sleep(0.5)
        if alive:
            self.outlived.append(run_id)
            for pid in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        return left


def _until(what: str, ready: Callable[[], Any], timeout: float, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, KeyError, ValueError):
            found = ready()
            if found:
                return found
        if time.monotonic() > deadline:
            raise SystemExit(f"waited {timeout:.0f} s for {what}")
        time.sleep(every)


def calibrate(bench: Bench) -> None:
    """``checkpoint_every`` for a checkpoint about every ``--checkpoint-s`` seconds, from the
    step rate of a run of the same model on the same hosts, 15 s after its first steps."""
    if bench.args.checkpoint_every:
        bench.checkpoint_every = bench.args.checkpoint_every
    run_id = bench.launch(1_000_000)
    try:
        began = bench.first_step(run_id)
        time.sleep(5)
        steps = [e for e in bench.attempts(run_id)[0] if e["type"] == "step" and e["time"] > began]
        first = steps[0]
        time.sleep(15)
        steps = [e for e in bench.attempts(run_id)[0] if e["type"] == "step"]
        last = steps[-1]
        step_s = (last["time"] - first["time"]) / max(1, last["step"] - first["step"])
    finally:
        bench.stop(run_id)
        left = bench.calibration_left = bench.left(run_id)
        bench.bed.restore()
    if not bench.checkpoint_every:
        bench.checkpoint_every = max(1, round(bench.args.checkpoint_s / step_s))
    bench.period_s = bench.checkpoint_every * step_s
    print(
        f"calibration: {step_s * 1000:.0f} ms a step; a checkpoint every "
        f"{bench.checkpoint_every} steps (about {bench.period_s:.0f} s)"
        + (f"; LEFT {len(left)} processes" if left else ""),
        flush=True,
    )


def schedule(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every round's class, faulted node (1 or 2) and moment (a fraction of the checkpoint
    interval past the checkpoint it waits for), drawn from ``--seed``, in a drawn order."""
    rng = random.Random(args.seed)
    rounds = [
        {"class": name, "node": rng.choice((1, 2)), "phase": rng.random()}
        for name in args.classes
        for _ in range(args.rounds)
    ]
    rng.shuffle(rounds)
    return rounds


def _drop_all(host: TestHost) -> None:
    """iptables DROP of everything the host sends or receives but over loopback: packets
    vanish both ways, connects and open connections time out."""
    host.state.firewalled = True  # so that restoring the bed flushes the rules, whatever
    for chain, way in (("INPUT", "-i"), ("OUTPUT", "-o")):
        run_on(host, ["iptables", "-I", chain, "!", way, "lo", "-j", "DROP"], check=True)


def inject(bench: Bench, name: str, host: TestHost, run_id: str) -> tuple[float, str]:
    """The fault, on ``host`` (node 0 for the checkpoint): its wall time, taken just before,
    and the truncated checkpoint's path for ``checkpoint``."""
    pid = 0
    if name in ("kill", "hang", "checkpoint"):
        pid = run_pid(host, run_id, b"LOCAL_RANK=0", b"trainer")
    at = time.time()
    truncated = ""
    if name in ("kill", "checkpoint"):
        os.kill(pid, signal.SIGKILL)
    elif name == "hang":
        os.kill(pid, signal.SIGSTOP)
    elif name == "cut":
        _drop_all(host)
    elif name == "host":
        kill_whole(host)
    if name == "checkpoint":
        # After the kill, as the bed test does: no newer one can be saved then (a save takes
        # every rank), so the one truncated is the newest the resume finds.
        (node,) = (bench.node0.workdir / "runs" / run_id).glob("node*")
        newest = max((node / "checkpoints").glob("ckpt-*.pt"))
        with newest.open("r+b") as damaged:
            damaged.truncate(newest.stat().st_size // 2)
        truncated = str(newest)
    return at, truncated


def _incident(record: dict[str, Any], after: float) -> dict[str, Any] | None:
    for incident in record.get("incidents", []):
        if incident["detected_at"] >= after:
            found: dict[str, Any] = incident
            return found
    return None


def _settled(incident: dict[str, Any] | None) -> bool:
    """The recovery's outcome is known: every rank stepped again, or it gave up."""
    if incident is None:
        return False
    action = incident.get("action", "")
    return "first_step_at" in incident or "not recovered" in action or "not resumed" in action


def one_round(bench: Bench, number: int, planned: dict[str, Any]) -> dict[str, Any]:
    """One run, one fault, measured; a round that goes wrong says why and the next goes on."""
    result: dict[str, Any] = {"round": number, **planned}
    try:
        run_id = bench.launch(bench.checkpoint_every)
    except (Exception, SystemExit) as error:
        bench.bed.restore()
        return {**result, "error": f"launch: {error}"}
    result["run"] = run_id
    try:
        result.update(_faulted(bench, run_id, planned))
    except (Exception, SystemExit) as error:
        result["error"] = f"{type(error).__name__}: {error}"
    finally:
        code, took = bench.stop(run_id)
        result.update(stop_exit=code, stop_s=round(took, 1), left=bench.left(run_id))
    if "error" not in result:
        try:
            result.update(_measured(bench, run_id, result))
        except (Exception, SystemExit) as error:
            result["error"] = f"measuring: {type(error).__name__}: {error}"
    bench.bed.restore()
    return result


def _faulted(bench: Bench, run_id: str, planned: dict[str, Any]) -> dict[str, Any]:
    """The fault injected into the launched run, the recovery followed, the run trained on to
    the round's end: the moments measured, and ``status --json`` then."""
    name, host = planned["class"], bench.bed.hosts[planned["node"]]
    result: dict[str, Any] = {"host": host.name}
    began = bench.first_step(run_id)

    # Two checkpoints: one to resume from past the truncated one (``checkpoint``), and the
    # interval as this run keeps it, for the moment. The calibration's step rate is off by a
    # tenth or more on a shared machine, and the first interval is slower than the next.
    def two_saved() -> list[dict[str, Any]]:
        saved = [e for e in bench.attempts(run_id)[0] if e["type"] == "checkpoint"]
        return saved[:2] if len(saved) >= 2 else []

    first, saved = _until("the second checkpoint", two_saved, 300)
    period = saved["time"] - first["time"]
    time.sleep(max(0.0, saved["time"] + planned["phase"] * period - time.time()))
    fault_at, truncated = inject(bench, name, host, run_id)
    result.update(first_step=began, period_s=period, fault_at=fault_at, truncated=truncated)
    deadline = time.monotonic() + RECOVERY_WAIT_S
    record = bench.record(run_id)
    while not _settled(_incident(record, fault_at)) and time.monotonic() < deadline:
        time.sleep(0.5)
        record = bench.record(run_id)
    if name in ("cut", "host"):
        # The link mended, the host back (rebooted: nothing of the run runs there): the
        # supervisor's sweep ends what the run left there, or finds nothing.
        if name == "cut":
            open_firewall(host)
        else:
            start_sshd(host)
        swept = time.monotonic()
        while time.monotonic() - swept < SWEEP_WAIT_S and _leftovers(bench.record(run_id)):
            time.sleep(1)
        result["swept_s"] = round(time.monotonic() - swept, 1)
    incident = _incident(bench.record(run_id), fault_at)
    until = began + bench.args.every_s
    if incident is not None and "first_step_at" in incident:
        until = max(until, incident["first_step_at"] + AFTER_RECOVERY_S)
    time.sleep(max(0.0, until - time.time()))
    result.update(ended=time.time(), status=bench.status(run_id))
    return result


def _leftovers(record: dict[str, Any]) -> list[str]:
    """The hosts set aside where the run's processes may still live."""
    return [aside["host"] for aside in record.get("set_aside", []) if aside.get("leftovers")]


def _measured(bench: Bench, run_id: str, result: dict[str, Any]) -> dict[str, Any]:
    fault_at, began, ended = result["fault_at"], result["first_step"], result["ended"]
    shown = result.pop("status")
    incidents = shown["incidents"]
    incident = next((i for i in incidents if i["detected_at"] >= fault_at), None)
    measured: dict[str, Any] = {
        "incidents": incidents,
        "false_before_fault": sum(1 for i in incidents if i["detected_at"] < fault_at),
        "restarts": len(shown["attempts"]) - 1,
        "state_at_end": shown["state"],
        "states_after_fault": [
            (change["state"], round(change["time"] - fault_at, 2))
            for change in shown["states"]
            if change["time"] >= fault_at
        ],
        # What the record says of it, kept to compare: the ratio printed is computed here.
        "record_ettr": shown.get("effective_training_time_ratio"),
    }
    # When the run was first judged failed or hung: what the incident's detected_at must say
    # (a later one would be a judgement the record missed).
    measured["judged_s"] = next(
        (at for state, at in measured["states_after_fault"] if state in ("failed", "hung")), None
    )
    attempts = bench.attempts(run_id)
    steps = {e["step"]: e["time"] for e in attempts[0] if e["type"] == "step"} if attempts else {}
    # Where the fault left the first attempt's last checkpoint: what is kept of it if none
    # resumed, and where the resume starts otherwise.
    saved_before = [
        e["step"] for e in (attempts[0] if attempts else []) if e["type"] == "checkpoint"
    ]
    resumed = incident is not None and incident.get("first_step_at") is not None
    if incident is not None:
        # What ending the failed attempt took (signals, hosts not answering): where the time
        # between the incident and the resume goes.
        measured["failed_attempt"] = next(
            (a.get("detail") for a in shown["attempts"] if a["number"] == incident["attempt"]),
            None,
        )
        measured.update(
            detect_s=incident["detected_at"] - fault_at,
            recover_s=incident["first_step_at"] - fault_at if resumed else None,
            steps_redone=incident["steps_redone"],
            checkpoint_step=incident["checkpoint_step"],
            last_step=incident["last_step"],
            blamed=incident["blamed"],
            blamed_right=incident["blamed"] == [result["host"]],
            cause=incident["cause"],
            action=incident["action"],
        )
    else:
        measured.update(detect_s=None, recover_s=None, steps_redone=None, blamed_right=False)
    if resumed:
        assert incident is not None
        start = incident["checkpoint_step"] or 0
        kept_until = steps.get(start, began)
        lost = incident["first_step_at"] - kept_until
    else:
        kept_until = steps.get(saved_before[-1], began) if saved_before else began
        lost = ended - kept_until
    measured.update(wall_s=ended - began, lost_s=lost)
    if result["class"] == "checkpoint":
        starts = attempts[1][0] if len(attempts) > 1 else {}
        passed = [s.get("path") for s in starts.get("skipped_checkpoints", [])]
        measured["passed_over_truncated"] = result["truncated"] in passed
    return measured


def quiet(bench: Bench) -> dict[str, Any]:
    """A run of the same settings and no fault, ``--quiet-s`` seconds past its first step."""
    run_id = bench.launch(bench.checkpoint_every)
    try:
        began = bench.first_step(run_id)
        while time.time() < began + bench.args.quiet_s:
            time.sleep(min(5.0, max(0.0, began + bench.args.quiet_s - time.time())))
        shown = bench.status(run_id)
    finally:
        code, took = bench.stop(run_id)
        left = bench.left(run_id)
    steps = [e for e in bench.attempts(run_id)[0] if e["type"] == "step"]
    bench.bed.restore()
    states = [change["state"] for change in shown["states"]]
    return {
        "run": run_id,
        "seconds": bench.args.quiet_s,
        "incidents": shown["incidents"],
        "restarts": len(shown["attempts"]) - 1,
        "states": states,
        "steps": steps[-1]["step"] if steps else 0,
        "stop_exit": code,
        "stop_s": round(took, 1),
        "left": left,
    }


def _spread(values: Sequence[float | None], form: str) -> str:
    known = [value for value in values if value is not None]
    if not known:
        return "—"
    middle = statistics.median(known)
    missing = f", {len(values) - len(known)} none" if len(known) < len(values) else ""
    if len(known) == 1:
        return f"{middle:{form}}{missing}"
    return f"{middle:{form}} ({min(known):{form}}–{max(known):{form}}{missing})"


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def report(
    bench: Bench, rounds: list[dict[str, Any]], still: dict[str, Any] | None
) -> dict[str, Any]:
    print(
        f"\n{'fault':19} {'n':>2}  {'judged s':17} {'detect s':17} {'target':10} "
        f"{'recover s':17} {'target':10} {'steps redone':18} {'blamed':6}"
    )
    summary: dict[str, Any] = {"classes": {}}
    for name in bench.args.classes:
        of = [r for r in rounds if r["class"] == name]
        if not of:
            continue
        detect, recover = [r.get("detect_s") for r in of], [r.get("recover_s") for r in of]
        redone = [r.get("steps_redone") for r in of]
        detect_ok = all(d is not None and d <= DETECT_TARGET_S[name] for d in detect)
        recover_ok = all(d is not None and d <= RECOVER_TARGET_S for d in recover)
        right = sum(1 for r in of if r.get("blamed_right"))
        extra = ""
        if name == "checkpoint":
            passed = sum(1 for r in of if r.get("passed_over_truncated"))
            extra = f"  passed over the truncated one {passed}/{len(of)}"
        judged = [r.get("judged_s") for r in of]
        print(
            f"{CLASSES[name]:19} {len(of):>2}  {_spread(judged, '.1f'):17} "
            f"{_spread(detect, '.1f'):17} ≤{DETECT_TARGET_S[name]:2.0f} {_met(detect_ok):6} "
            f"{_spread(recover, '.1f'):17} ≤{RECOVER_TARGET_S:2.0f} {_met(recover_ok):6} "
            f"{_spread(redone, '.0f'):18} {right}/{len(of)}{extra}"
        )
        summary["classes"][name] = {
            "judged_s": judged,
            "detect_s": detect,
            "recover_s": recover,
            "steps_redone": redone,
            "blamed_right": right,
            "detect_met": detect_ok,
            "recover_met": recover_ok,
        }
    for failed in (r for r in rounds if "error" in r):
        print(f"round {failed['round']} ({failed['class']}) not measured: {failed['error']}")
    measured = [r for r in rounds if "wall_s" in r]
    wall = sum(r["wall_s"] for r in measured)
    lost = sum(r["lost_s"] for r in measured)
    ettr = (wall - lost) / wall if wall else float("nan")
    restarts = sum(r.get("restarts", 0) for r in rounds) + (still or {}).get("restarts", 0)
    false = sum(r.get("false_before_fault", 0) for r in rounds)
    quiet_false = len((still or {}).get("incidents", []))
    left = sum(len(r.get("left", [])) for r in rounds) + len((still or {}).get("left", []))
    left += len(bench.calibration_left)
    print(
        f"\neffective training time: {ettr:.3f} ({wall - lost:.0f} s of {wall:.0f} s, one fault "
        f"every ~{bench.args.every_s:.0f} s; target ≥ {ETTR_TARGET}: {_met(ettr >= ETTR_TARGET)})"
    )
    print(f"restarts: {restarts} (one a fault: {len(rounds)})")
    if still is not None and "error" in still:
        print(f"fault-free run not measured: {still['error']}")
    elif still is not None:
        print(
            f"false recoveries in {still['seconds']:.0f} s fault-free: {quiet_false} "
            f"({still['steps']} steps; target 0: {_met(quiet_false == 0)})"
            + (f"; and {false} before a round's fault" if false else "")
        )
    print(f"processes left on the hosts after the runs ended: {left} (target 0: {_met(left == 0)})")
    if bench.outlived:
        print(
            f"supervisors alive {SUPERVISOR_EXIT_S:.0f} s after their run's stop (then killed): "
            + ", ".join(bench.outlived)
        )
    summary.update(
        ettr=ettr,
        wall_s=wall,
        lost_s=lost,
        restarts=restarts,
        false_recoveries=quiet_false,
        incidents_before_a_fault=false,
        processes_left=left,
        supervisors_outlived=bench.outlived,
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each fault class")
    parser.add_argument(
        "--classes",
        type=lambda text: [name for name in text.split(",") if name],
        default=list(CLASSES),
        help=f"comma-separated, of {','.join(CLASSES)} (default: all)",
    )
    parser.add_argument("--quiet-s", type=float, default=600.0, help="the fault-free run (0: none)")
    parser.add_argument("--every-s", type=float, default=180.0, help="a round's wall time")
    parser.add_argument("--seed", type=int, default=43)
    parser.add_argument("--checkpoint-s", type=float, default=20.0)
    parser.add_argument("--checkpoint-every", type=int, default=0, help="steps (0: calibrated)")
    parser.add_argument("--hang-timeout-s", type=float, default=10.0)
    parser.add_argument("--json", type=Path, help="write every number here")
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory (records, supervisor logs)"
    )
    args = parser.parse_args()
    unknown = [name for name in args.classes if name not in CLASSES]
    if unknown:
        parser.error(f"unknown classes {unknown}; of {', '.join(CLASSES)}")
    planned = schedule(args)
    print(
        f"{len(planned)} rounds (seed {args.seed}): "
        + ", ".join(f"{p['class']}@node{p['node']}+{p['phase']:.2f}" for p in planned),
        flush=True,
    )
    began = time.monotonic()
    with contextlib.ExitStack() as cleanup:
        if args.keep:
            work = Path(tempfile.mkdtemp(prefix="ddptui-chaos-"))
            print(f"kept: {work} (the run store in state/)")
        else:
            work = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="ddptui-chaos-")))
        bed = TestBed.start(4, work / "bed", prefix=PREFIX)
        bench = Bench(bed, work, args)
        rounds: list[dict[str, Any]] = []
        still = None
        try:
            calibrate(bench)
            for number, plan in enumerate(planned, 1):
                done = one_round(bench, number, plan)
                rounds.append(done)
                _say_round(done, len(planned))
            if args.quiet_s > 0:
                try:
                    still = quiet(bench)
                except (Exception, SystemExit) as error:
                    still = {"error": f"{type(error).__name__}: {error}"}
                    bench.bed.restore()
            if still is not None and "error" not in still:
                print(
                    f"fault-free {args.quiet_s:.0f} s ({still['run']}): "
                    f"{len(still['incidents'])} incidents, states {' > '.join(still['states'])}",
                    flush=True,
                )
        finally:
            # Whatever stopped the bench, no supervisor of it follows a run of a bed that is gone.
            kill_supervisors(bench.cli.store)
            bed.stop()
    summary = report(bench, rounds, still)
    took = time.monotonic() - began
    print(f"{took / 60:.1f} min")
    if args.json is not None:
        document = {
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "checkpoint_every": bench.checkpoint_every,
            "checkpoint_period_s": bench.period_s,
            "calibration_left": bench.calibration_left,
            "schedule": planned,
            "rounds": rounds,
            "quiet": still,
            "summary": summary,
            "minutes": took / 60,
        }
        args.json.write_text(json.dumps(document, indent=1) + "\n")


def _say_round(done: dict[str, Any], total: int) -> None:
    def seconds(key: str) -> str:
        value = done.get(key)
        return "—" if value is None else f"{value:.1f} s"

    if "wall_s" not in done:
        print(
            f"round {done['round']:2d}/{total} {done['class']:10} ({done.get('run')}): "
            f"{done.get('error')}; left {len(done.get('left', []))}",
            flush=True,
        )
        return
    print(
        f"round {done['round']:2d}/{total} {done['class']:10} on {done['host']} ({done['run']}): "
        f"detect {seconds('detect_s')}, recover {seconds('recover_s')}, "
        f"{done.get('steps_redone')} steps redone, lost {done['lost_s']:.1f} s of "
        f"{done['wall_s']:.0f} s; blamed {done.get('blamed')}; left {len(done['left'])}"
        + (f"; swept in {done['swept_s']} s" if "swept_s" in done else ""),
        flush=True,
    )


if __name__ == "__main__":
    main()
