"""Entry point: ``torchrun … -m trainer --run-dir DIR [args]`` or ``python -m trainer`` alone."""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Sequence

from torch.distributed.elastic.multiprocessing.errors import record

from . import dist
from .cli import parse_args
from .events import EventLog, process_started_at
from .loop import Trainer


def _warn(message: str) -> None:
    print(f"trainer: warning: {message}", file=sys.stderr, flush=True)


# @record writes the exception to torchrun's error file, so the launcher reports the root cause.
@record
def main(argv: Sequence[str] | None = None) -> int:
    """Exit status 0 when the run completed or stopped on request; an exception otherwise."""
    imported = time.time()
    cfg = parse_args(argv)
    placement = dist.Placement.from_env()
    log = EventLog(cfg.run_dir, placement)
    trainer: Trainer | None = None
    try:
        rt = dist.start(cfg.backend, cfg.dist_timeout)
        launch = {"process": process_started_at(), "imported": imported, "rendezvous": time.time()}
        trainer = Trainer(cfg, rt, log)
        if trainer.resumed is not None and rt.placement.rank == 0:
            for skipped in trainer.resumed.skipped:
                _warn(f"skipped checkpoint {skipped.path}: {skipped.reason}")
            saved, shape = trainer.resumed.shape, trainer.shape
            if saved != shape:
                _warn(
                    "resuming at another world size or batch shape (world size × batch size × "
                    f"grad-accum {saved.world_size} × {saved.batch_size} × {saved.grad_accum} → "
                    f"{shape.world_size} × {shape.batch_size} × {shape.grad_accum}): the data "
                    f"position is kept exactly and the global batch kept at {shape.global_batch}; "
                    "sums run in another order, so losses will not repeat an uninterrupted run's "
                    "bit for bit"
                )
            if trainer.resumed.reordered:
                _warn(
                    f"{trainer.resumed.path} predates the world-size independent sample order: "
                    f"the rest of epoch {trainer.resumed.progress.epoch} is drawn from today's "
                    "order and may repeat or miss samples of it"
                )
        elif cfg.resume == "latest" and rt.placement.rank == 0:
            _warn(f"no checkpoint in {trainer.store.directory}: starting from scratch")
        log.emit("start", **trainer.start_event(), launch=launch)
        outcome = trainer.run()
        dist.stop()
        log.emit("done", step=outcome.step, reason=outcome.reason)
        return 0
    except Exception as e:
        if trainer is not None and trainer.rescuer is not None:
            trainer.rescuer.after(e)
        log.emit("error", message=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
        dist.dump_flight_recorder(placement.rank)
        raise
    finally:
        log.close()
