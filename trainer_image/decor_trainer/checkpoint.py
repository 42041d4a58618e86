"""Checkpoint helpers: stop on SIGTERM, save atomically, resume at the exact step.

The pattern (what :mod:`decor_trainer.train` does)::

    position = load_checkpoint(path, model=model, optimizer=optimizer) or TrainingPosition()
    saver = PeriodicSaver(every_s=60.0)
    with stop_on_signals() as stop:
        for step in range(position.step, steps_planned):
            if stop.requested:
                break
            ...train one mini-batch...
            position = TrainingPosition(step + 1, (step + 1) // steps_per_epoch, samples)
            if saver.due():
                save_checkpoint(path, model=model, optimizer=optimizer, position=position)
                saver.saved()
    save_checkpoint(path, model=model, optimizer=optimizer, position=position)

A checkpoint holds the model and optimizer state, the position (step, epoch, samples) and
the RNG state of Python, PyTorch's CPU generator and, when CUDA is available, every CUDA
device's generator, and the Unix time it was saved (``saved_at_s``: the restart cost is
measured from it, :func:`restart_seconds`).

Checkpoints do not depend on the number of workers that wrote them: rank 0 alone saves,
the state dict of the model *inside* ``DistributedDataParallel`` (no ``module.`` prefix),
and the position counts global steps and the samples all workers consumed together; the
order of the data is a pure function of the seed and the dataset size
(:class:`decor_trainer.distributed.DataOrder`), stored in ``data_order``. A run at M workers
resumes an N-worker checkpoint at the exact global step and sample. Loading maps every tensor to the CPU first (RNG states must be CPU byte
tensors) and ``load_state_dict`` then copies parameters and optimizer state onto the devices
the model already lives on, so a checkpoint written on a GPU resumes on a CPU and back.
"""

from __future__ import annotations

import inspect
import logging
import os
import random
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import torch

log = logging.getLogger(__name__)

CHECKPOINT_FILENAME = "checkpoint.pt"
"""File name of the checkpoint inside the checkpoint directory (``docs/contract.md``)."""
FORMAT_VERSION = 1
"""Version of the checkpoint's layout; bumped on incompatible changes."""

# torch.load(weights_only=True) refuses arbitrary pickled code. PyTorch 1.13 has the flag but
# its restricted unpickler cannot even read a float, so only use it from 2.0 on (2.6 made it
# the default there).
_USE_WEIGHTS_ONLY = (
    "weights_only" in inspect.signature(torch.load).parameters
    and int(torch.__version__.split(".")[0]) >= 2
)


@dataclass(frozen=True)
class TrainingPosition:
    """Where training stands: ``step`` mini-batches and ``epoch`` whole epochs completed
    since the job started, ``samples`` training samples completed (all >= 0)."""

    step: int = 0
    epoch: int = 0
    samples: int = 0


def checkpoint_path(directory: str | os.PathLike[str]) -> Path:
    """The checkpoint file inside ``directory``."""
    return Path(directory) / CHECKPOINT_FILENAME


class StopRequest:
    """A flag a signal handler sets; the training loop polls :attr:`requested`."""

    def __init__(self) -> None:
        self.requested = False
        self.signal_number: int | None = None

    def request(self, signal_number: int | None = None) -> None:
        """Ask the loop to stop after the current mini-batch."""
        self.requested = True
        self.signal_number = signal_number

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.request(signum)


@contextmanager
def stop_on_signals(
    signals: Iterable[signal.Signals] = (signal.SIGTERM,),
) -> Iterator[StopRequest]:
    """Install handlers that turn ``signals`` into a :class:`StopRequest`; restore on exit.

    Outside the main thread Python cannot install signal handlers: the request then only
    stops the loop if someone calls :meth:`StopRequest.request` (a warning is logged).
    """
    stop = StopRequest()
    previous: dict[signal.Signals, Any] = {}
    try:
        for signum in signals:
            try:
                previous[signum] = signal.signal(signum, stop._handler)
            except ValueError as exc:  # not the main thread
                log.warning("cannot install a handler for %s: %s", signum.name, exc)
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def rng_state() -> dict[str, Any]:
    """The RNG state of Python, PyTorch's CPU generator and (if available) CUDA generators."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` returned (CUDA states only if the device count matches)."""
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "torch" in state:
        torch.set_rng_state(state["torch"].cpu())
    cuda_states = state.get("cuda")
    if cuda_states is not None and torch.cuda.is_available():
        if len(cuda_states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all([s.cpu() for s in cuda_states])
        else:
            log.warning(
                "checkpoint has RNG state for %d CUDA devices, this process sees %d; "
                "CUDA RNG not restored",
                len(cuda_states),
                torch.cuda.device_count(),
            )


def save_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    position: TrainingPosition,
    meta: Mapping[str, Any] | None = None,
    data_order: Mapping[str, int] | None = None,
    wall_clock: Callable[[], float] = time.time,
) -> None:
    """Atomically write a checkpoint to ``path`` (creating its directory).

    Writes a temporary file next to ``path``, fsyncs it, renames it over ``path`` and fsyncs
    the directory, so ``path`` always holds a complete checkpoint. ``meta`` is a small dict
    of plain values (e.g. the workload's configuration) stored alongside; ``data_order`` the
    state of the data order (``seed``, ``dataset_size``); ``wall_clock`` gives the save stamp
    (Unix seconds). Raises ``OSError``
    (or what ``torch.save`` raises) on failure; the previous checkpoint is then intact.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": FORMAT_VERSION,
        "step": position.step,
        "epoch": position.epoch,
        "samples": position.samples,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "rng": rng_state(),
        "meta": dict(meta or {}),
        "data_order": dict(data_order or {}),
        "saved_at_s": float(wall_clock()),
    }
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems do not support fsync on directories
        pass
    finally:
        os.close(fd)


def read_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The raw checkpoint dict at ``path`` with every tensor on the CPU, or None if absent.

    Uses ``torch.load(weights_only=True)`` on PyTorch 2.x: a checkpoint holds only tensors
    and plain values, so nothing in it gets to run code. On 1.13 that mode cannot read
    floats, so the file is unpickled normally: only load checkpoints you wrote.
    """
    target = Path(path)
    if not target.exists():
        return None
    kwargs: dict[str, Any] = {"map_location": "cpu"}
    if _USE_WEIGHTS_ONLY:
        kwargs["weights_only"] = True
    with open(target, "rb") as f:
        data = torch.load(f, **kwargs)
    if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
        raise ValueError(f"{target} is not a DECOR checkpoint of format {FORMAT_VERSION}")
    return data


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    restore_rng: bool = True,
) -> TrainingPosition | None:
    """Restore model, optimizer and RNG state from ``path``; None if there is no checkpoint.

    Returns the position to resume from: the next mini-batch to run is ``position.step``.
    Works whatever device the checkpoint was written on (see the module docstring). Raises
    if the file exists but cannot be read or does not fit the model.
    """
    data = read_checkpoint(path)
    if data is None:
        return None
    return apply_checkpoint(data, model=model, optimizer=optimizer, restore_rng=restore_rng)


def apply_checkpoint(
    data: Mapping[str, Any],
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    restore_rng: bool = True,
) -> TrainingPosition:
    """Restore what :func:`read_checkpoint` returned into ``model`` and ``optimizer``.

    For callers that inspect ``data["meta"]`` before restoring; returns the position.
    """
    model.load_state_dict(data["model"])
    if optimizer is not None and data.get("optimizer") is not None:
        optimizer.load_state_dict(data["optimizer"])
    if restore_rng:
        set_rng_state(data.get("rng") or {})
    return TrainingPosition(
        step=int(data["step"]), epoch=int(data["epoch"]), samples=int(data["samples"])
    )


def saved_at_s(data: Mapping[str, Any]) -> float | None:
    """Unix time at which the checkpoint ``data`` was saved; None for older checkpoints."""
    value = data.get("saved_at_s")
    return float(value) if value is not None else None


def restart_seconds(data: Mapping[str, Any], first_step_done_at_s: float) -> float | None:
    """Restart cost: seconds from the checkpoint's save stamp to ``first_step_done_at_s``
    (Unix time the first step after the resume completed). The save happens when the stop
    is requested (SIGTERM), so this covers the stop, the new pod or process, imports,
    loading and the first step. None without a stamp; clock skew between nodes shows."""
    saved = saved_at_s(data)
    return None if saved is None else max(0.0, first_step_done_at_s - saved)


class PeriodicSaver:
    """Says when a periodic checkpoint is due: every ``every_s`` seconds (0 = never).

    Time is measured with ``clock`` (monotonic seconds) from creation or the last
    :meth:`saved`.
    """

    def __init__(self, every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if every_s < 0:
            raise ValueError(f"every_s must be >= 0, got {every_s}")
        self.every_s = every_s
        self._clock = clock
        self._last = clock()

    def due(self) -> bool:
        """True when ``every_s`` seconds have passed since the last save."""
        return self.every_s > 0 and self._clock() - self._last >= self.every_s

    def saved(self) -> None:
        """Record that a checkpoint was just written."""
        self._last = self._clock()
