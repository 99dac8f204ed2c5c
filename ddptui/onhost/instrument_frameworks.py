"""ddptui's events from Lightning, Hugging Face's ``Trainer`` and Accelerate
(:mod:`ddptui.onhost.instrument` says how they are added): written beside it as
``ddptui_instrument_frameworks.py`` and imported by it once a script imports one of them.

Never imported by ddptui: its source is what is written. Stdlib only, Python ≥ 3.8.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import ddptui_instrument as core  # type: ignore[import-not-found]


def lightning(pl: Any) -> None:
    trainer_class = pl.Trainer
    callback_class = pl.Callback
    version = str(getattr(pl, "__version__", "?"))
    events = core.rank_events()

    class DdptuiEvents(callback_class):  # type: ignore[misc, valid-type]
        """ddptui's events from this rank's Lightning ``Trainer``."""

        def __init__(self) -> None:
            self.rank = core.Rank(events, "lightning", version)
            self.stops = core.StopRequests()
            self.stopped = False

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            core.guarded("on_train_start", self._start)(trainer, pl_module)

        def _start(self, trainer: Any, pl_module: Any) -> None:
            total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
            if total is None:
                try:
                    total = int(trainer.estimated_stepping_batches)
                except Exception:
                    total = None
            parameters = sum(p.numel() for p in pl_module.parameters())
            ckpt = getattr(trainer, "ckpt_path", None)
            self.rank.start(
                total_steps=total,
                start_step=int(trainer.global_step),
                start_epoch=int(trainer.current_epoch),
                resumed_from=str(ckpt) if ckpt else None,
                device=str(pl_module.device),
                parameters=int(parameters),
                control=["stop"],
            )

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            core.guarded("on_train_batch_end", self._batch_end)(trainer, outputs, batch)
            if self.stops.asked(trainer.strategy.root_device):
                self._stop(trainer)

        def _stop(self, trainer: Any) -> None:
            """ddptui's stop: the checkpoint ``fit(ckpt_path="last")`` resumes from, on every
            rank at this step (Lightning writes it on rank 0), then the end of training."""
            callback = trainer.checkpoint_callback
            directory = getattr(callback, "dirpath", None) or trainer.default_root_dir
            path = getattr(callback, "last_model_path", "") or str(Path(directory, "last.ckpt"))
            core.guarded("stop", self.rank.phase)("checkpoint")
            began = time.monotonic()
            trainer.save_checkpoint(path)
            core.guarded("stop", self.rank.checkpoint)(path, time.monotonic() - began)
            for each in getattr(trainer, "checkpoint_callbacks", ()):
                # Saved at this step: the epoch's end and the training's end that stopping runs
                # through save nothing over it (a checkpoint that says the epoch was done would
                # skip the rest of it on resume).
                with contextlib.suppress(AttributeError):
                    each._last_global_step_saved = trainer.global_step
                    each._last_checkpoint_saved = each.last_model_path = path
            trainer.should_stop = True
            self.stopped = True

        def _batch_end(self, trainer: Any, outputs: Any, batch: Any) -> None:
            self.rank.pace.add(core.batch_size_of(batch))
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            step = int(trainer.global_step)
            if step > self.rank.last_step:
                self.rank.step(step, core.number_of(loss), epoch=int(trainer.current_epoch))

        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            if self.rank.started:
                core.guarded("on_validation_start", self.rank.phase)("eval")

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            if self.rank.started:
                core.guarded("on_validation_end", self.rank.phase)("train")

        def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
            if self.rank.started:
                core.guarded("on_save_checkpoint", self.rank.phase)("checkpoint")

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            core.guarded("on_train_epoch_end", events.emit)(
                "epoch_end", epoch=int(trainer.current_epoch), step=int(trainer.global_step)
            )

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            stopped = self.stopped or bool(getattr(trainer, "received_sigterm", False))
            core.guarded("on_train_end", self.rank.done)(stopped)

    original = trainer_class.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        callbacks = kwargs.get("callbacks")
        if callbacks is None:
            callbacks = []
        elif not isinstance(callbacks, list):
            callbacks = [callbacks] if isinstance(callbacks, callback_class) else list(callbacks)
        else:
            callbacks = list(callbacks)
        callbacks.append(DdptuiEvents())
        kwargs["callbacks"] = callbacks
        original(self, *args, **kwargs)

    trainer_class.__init__ = __init__


def transformers(module: Any) -> None:
    trainer_class = module.Trainer
    callback_class = sys.modules["transformers.trainer_callback"].TrainerCallback
    version = str(getattr(sys.modules["transformers"], "__version__", "?"))
    events = core.rank_events()

    class DdptuiEvents(callback_class):  # type: ignore[misc, valid-type]
        """ddptui's events from this rank's Hugging Face ``Trainer``."""

        def __init__(self, trainer: Any) -> None:
            self.rank = core.Rank(events, "transformers", version)
            self.trainer = trainer
            self.losses: list[float | None] = []
            self.resumed_from: str | None = None
            self.stops = core.StopRequests()
            self.stopped = False

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            core.guarded("on_train_begin", self._start)(args, state, kwargs.get("model"))

        def _start(self, args: Any, state: Any, model: Any) -> None:
            parameters = sum(p.numel() for p in model.parameters()) if model is not None else None
            self.rank.start(
                total_steps=int(state.max_steps) if state.max_steps else None,
                start_step=int(state.global_step),
                resumed_from=self.resumed_from,
                device=str(args.device),
                parameters=parameters,
                global_batch=int(args.per_device_train_batch_size)
                * int(args.gradient_accumulation_steps)
                * int(args.world_size),
                control=["stop"],
            )
            self.per_step = int(args.per_device_train_batch_size) * int(
                args.gradient_accumulation_steps
            )

        def resuming(self, resumed: Any, output_dir: str) -> None:
            """``resume_from_checkpoint``: a path, or True for the newest in ``output_dir``."""
            if resumed is True:
                utils = sys.modules["transformers.trainer_utils"]
                resumed = utils.get_last_checkpoint(output_dir)
            if isinstance(resumed, str):
                self.resumed_from = _absolute(resumed)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            core.guarded("on_step_end", self._step)(state)
            if self.stops.asked(args.device):
                # ddptui's stop: the Trainer saves checkpoint-<step> (every process its part),
                # then ends training, on every rank at this step.
                control.should_save = True
                control.should_training_stop = True
                self.stopped = True

        def _step(self, state: Any) -> None:
            losses, self.losses = self.losses, []
            self.rank.pace.add(self.per_step)
            self.rank.step(
                int(state.global_step), core.total_of(losses), epoch=core.epoch_of(state.epoch)
            )

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            core.guarded("on_train_end", self.rank.done)(self.stopped)

    original_init = trainer_class.__init__
    original_step = trainer_class.training_step
    original_save = trainer_class._save_checkpoint
    original_evaluate = trainer_class.evaluate
    original_train = trainer_class.train

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self._ddptui_events = DdptuiEvents(self)
        self.add_callback(self._ddptui_events)

    def training_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        loss = original_step(self, *args, **kwargs)
        hook = getattr(self, "_ddptui_events", None)
        if hook is not None:
            # The rank's own loss, as the step returned it (per micro-batch, already divided
            # by the accumulation steps): summed at the optimizer step.
            hook.losses.append(core.number_of(loss))
        return loss

    def _save_checkpoint(self: Any, *args: Any, **kwargs: Any) -> Any:
        hook = getattr(self, "_ddptui_events", None)
        if hook is not None and hook.rank.started:
            core.guarded("_save_checkpoint", hook.rank.phase)("checkpoint")
        return original_save(self, *args, **kwargs)

    def evaluate(self: Any, *args: Any, **kwargs: Any) -> Any:
        hook = getattr(self, "_ddptui_events", None)
        if hook is not None and hook.rank.started:
            core.guarded("evaluate", hook.rank.phase)("eval")
        try:
            return original_evaluate(self, *args, **kwargs)
        finally:
            if hook is not None and hook.rank.started:
                core.guarded("evaluate", hook.rank.phase)("train")

    def train(self: Any, *args: Any, **kwargs: Any) -> Any:
        hook = getattr(self, "_ddptui_events", None)
        if hook is not None:
            resumed = kwargs.get("resume_from_checkpoint", args[0] if args else None)
            core.guarded("train", hook.resuming)(resumed, self.args.output_dir)
        return original_train(self, *args, **kwargs)

    trainer_class.__init__ = __init__
    trainer_class.training_step = training_step
    trainer_class._save_checkpoint = _save_checkpoint
    trainer_class.evaluate = evaluate
    trainer_class.train = train


def accelerate(module: Any) -> None:
    accelerator_class = module.Accelerator
    version = str(getattr(module, "__version__", "?"))
    rank = core.Rank(core.rank_events(), "accelerate", version)
    losses: list[float | None] = []
    batch: list[int] = []
    original_backward = accelerator_class.backward
    original_prepare = accelerator_class.prepare_data_loader
    original_save = accelerator_class.save_state
    original_load = accelerator_class.load_state
    resumed: dict[str, Any] = {}

    def prepare_data_loader(self: Any, *args: Any, **kwargs: Any) -> Any:
        loader = original_prepare(self, *args, **kwargs)
        # The samples of one backward on this rank: the prepared loader's, split over ranks.
        total = getattr(loader, "total_batch_size", None)
        if isinstance(total, int) and total > 0 and not batch:
            batch.append(max(total // max(int(self.num_processes), 1), 1))
        return loader

    def backward(self: Any, loss: Any, **kwargs: Any) -> Any:
        result = original_backward(self, loss, **kwargs)
        core.guarded("backward", _after_backward)(self, loss)
        return result

    def save_state(self: Any, *args: Any, **kwargs: Any) -> Any:
        if rank.started:
            core.guarded("save_state", rank.phase)("checkpoint")
        began = time.monotonic()
        location = original_save(self, *args, **kwargs)
        if rank.started:
            core.guarded("save_state", _saved)(location, time.monotonic() - began)
        return location

    def _saved(location: Any, seconds: float) -> None:
        rank.checkpoint(_absolute(location), seconds)
        rank.phase("train")

    def load_state(self: Any, input_dir: Any = None, *args: Any, **kwargs: Any) -> Any:
        result = original_load(self, input_dir, *args, **kwargs)
        if input_dir is not None:
            core.guarded("load_state", _loaded)(_absolute(input_dir))
        return result

    def _loaded(path: str) -> None:
        # Accelerate counts no steps: the step this rank's own checkpoint event gave the state.
        resumed["resumed_from"] = path
        resumed["start_step"] = rank.saved_step(path) or 0

    def _after_backward(accelerator: Any, loss: Any) -> None:
        if not rank.started:
            rank.start(device=str(accelerator.device), **{"start_step": 0, **resumed})
            atexit.register(core.guarded("exit", _exited))
        losses.append(core.number_of(loss))
        rank.pace.add(batch[0] if batch else None)
        if accelerator.sync_gradients:
            taken = list(losses)
            del losses[:]
            rank.step(rank.last_step + 1, core.total_of(taken))

    def _exited() -> None:
        # An Accelerate script has no end of training to hook: its process ending without an
        # uncaught exception is it (a signal that ends it runs no exit handler).
        if not core.ERRORS:
            rank.done(False)

    accelerator_class.backward = backward
    accelerator_class.prepare_data_loader = prepare_data_loader
    accelerator_class.save_state = save_state
    accelerator_class.load_state = load_state


def _absolute(path: Any) -> str:
    """A checkpoint's path as its save and its load both name it: absolute, links kept."""
    return str(Path(str(path)).expanduser().absolute())
