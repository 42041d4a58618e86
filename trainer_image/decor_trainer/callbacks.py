"""One-line progress reporting for Hugging Face's ``Trainer`` and Lightning.

::

    from decor_trainer.callbacks import DecorTrainerCallback
    trainer = Trainer(..., callbacks=[DecorTrainerCallback()])          # Hugging Face

    from decor_trainer.callbacks import DecorLightningCallback
    trainer = lightning.Trainer(..., callbacks=[DecorLightningCallback()])

Both report through :class:`~decor_trainer.reporter.ProgressReporter` (the sidecar's progress
file or the in-process endpoint, from the environment DECOR gives the trainer) with the same
metric names as a hand-written loop. They count optimizer steps (what the library calls the
global step), so a resumed run starts its counter at the checkpoint's step: the library
restores its step and the callback picks it up at the start of training. Only the process of
global rank 0 reports. Samples per step are ``batch size x gradient accumulation x world
size``, or 0 when the library does not say. After the last planned step the endpoint stays up
until a scrape has shown it (``DECOR_METRICS_LINGER_S`` at most), as with the two-line
helper. Reporting never raises into training.

Versions tested here: transformers 4.44.2 with accelerate 0.33.0 on PyTorch 1.13 (the
``integrations`` extra); Lightning 2.6.6, transformers 5.24.0 and accelerate 1.15.0 on
PyTorch 2.6 (trainer_image/frameworks-torch2.txt, docs/pytorch.md). Lightning does not
import on Debian's 1.13 build under Python 3.11 (docs/tools.md).
"""

from __future__ import annotations

import logging
from typing import Any

from .progress import linger_seconds
from .reporter import ProgressReporter

log = logging.getLogger(__name__)


class _StepBridge:
    """Turns a library's global step into reporter calls; shared by both callbacks.

    ``reporter`` is made at training start from the environment unless one is given; the
    plan is ``steps_planned`` (total optimizer steps) when the library knows it.
    """

    def __init__(self, reporter: ProgressReporter | None, samples_per_step: int | None) -> None:
        self.reporter = reporter
        self._own_reporter = reporter is None
        self._samples_per_step = samples_per_step
        self._last_step = 0

    def start(self, *, global_step: int, steps_planned: int, epochs_planned: int,
              epoch: int, samples_per_step: int) -> None:  # fmt: skip
        """Training (re)starts at ``global_step`` (the checkpoint's step on a resume)."""
        if self._samples_per_step is None:
            self._samples_per_step = samples_per_step
        self._last_step = global_step
        if self.reporter is None:
            self.reporter = ProgressReporter.from_env(
                steps_planned=steps_planned,
                epochs_planned=epochs_planned,
                start_step=global_step,
                start_samples=global_step * (self._samples_per_step or 0),
                start_epoch=epoch,
            )

    def step(self, global_step: int) -> None:
        """The library's global step is now ``global_step``: report the steps since the last."""
        if self.reporter is None:
            return
        while self._last_step < global_step:
            self.reporter.step_done(self._samples_per_step or 0)
            self._last_step += 1

    def epoch(self) -> None:
        if self.reporter is not None:
            self.reporter.epoch_done()

    def end(self) -> None:
        """Training ended. After the last planned step the endpoint stays up until a scrape
        has shown it (``DECOR_METRICS_LINGER_S`` at most), so the controller sees the finish
        with the last step's own time stamp; then it closes."""
        if self.reporter is not None and self._own_reporter:
            self.reporter.linger(linger_seconds())
            self.reporter.close()


def _guard(what: str, fn: Any, *args: Any, **kwargs: Any) -> None:
    try:
        fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - reporting never breaks training
        log.warning("decor progress callback: %s failed: %r", what, exc)


try:
    from transformers import TrainerCallback as _HFBase
except ImportError:  # transformers not installed: the class still exists, unusable with HF
    _HFBase = object  # type: ignore[assignment,misc]


class DecorTrainerCallback(_HFBase):  # type: ignore[misc,valid-type]
    """Hugging Face ``TrainerCallback`` reporting DECOR progress (rank 0 only).

    Arguments: ``reporter`` to report through (default: one from the environment, made when
    training starts); ``samples_per_step`` (default: per-device batch x accumulation x
    world size from ``TrainingArguments``).
    """

    def __init__(
        self, reporter: ProgressReporter | None = None, samples_per_step: int | None = None
    ) -> None:
        self.bridge = _StepBridge(reporter, samples_per_step)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
        _guard("on_train_begin", self.bridge.start,
               global_step=int(state.global_step), steps_planned=int(state.max_steps or 0),
               epochs_planned=int(state.num_train_epochs or 0), epoch=int(state.epoch or 0),
               samples_per_step=per_step * max(1, int(args.world_size)))  # fmt: skip

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            _guard("on_step_end", self.bridge.step, int(state.global_step))

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            _guard("on_epoch_end", self.bridge.epoch)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            _guard("on_train_end", self.bridge.end)


try:
    from lightning.pytorch import Callback as _LBase
except ImportError:
    try:
        from pytorch_lightning import Callback as _LBase
    except Exception:  # noqa: BLE001 - not installed, or fails to import on this PyTorch
        _LBase = object  # type: ignore[assignment,misc]
except Exception:  # noqa: BLE001
    _LBase = object  # type: ignore[assignment,misc]


class DecorLightningCallback(_LBase):  # type: ignore[misc,valid-type]
    """Lightning ``Callback`` reporting DECOR progress (global rank 0 only).

    Arguments as :class:`DecorTrainerCallback`; samples per step default to 0 (Lightning does
    not know a batch's size in general): pass ``samples_per_step`` to count samples.
    """

    def __init__(
        self, reporter: ProgressReporter | None = None, samples_per_step: int | None = None
    ) -> None:
        self.bridge = _StepBridge(reporter, samples_per_step)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.global_rank != 0:
            return
        max_steps = int(trainer.max_steps) if trainer.max_steps and trainer.max_steps > 0 else 0
        if not max_steps and trainer.max_epochs and trainer.num_training_batches != float("inf"):
            accumulate = max(1, int(trainer.accumulate_grad_batches))
            max_steps = int(trainer.max_epochs * trainer.num_training_batches) // accumulate
        _guard("on_train_start", self.bridge.start,
               global_step=int(trainer.global_step), steps_planned=max_steps,
               epochs_planned=int(trainer.max_epochs or 0), epoch=int(trainer.current_epoch),
               samples_per_step=0)  # fmt: skip

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_rank == 0:
            _guard("on_train_batch_end", self.bridge.step, int(trainer.global_step))

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.global_rank == 0:
            _guard("on_train_epoch_end", self.bridge.epoch)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.global_rank == 0:
            _guard("on_train_end", self.bridge.end)
