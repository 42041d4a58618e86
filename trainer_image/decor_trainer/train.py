"""Reference trainer: ``python -m decor_trainer.train --workload resnet --epochs 4 ...``.

Runs one of the reference workloads (:mod:`decor_trainer.workloads`) for
``epochs x steps_per_epoch`` mini-batches, reporting progress after every mini-batch
(in-process ``/metrics`` endpoint, or the progress file when ``--progress-file`` or
``DECOR_PROGRESS_FILE`` is set) and checkpointing to ``<checkpoint-dir>/checkpoint.pt``:
every ``--checkpoint-every-s`` seconds, on SIGTERM (after finishing the current mini-batch;
then exits 0) and at the end. On start it resumes from that checkpoint at the exact step;
a checkpoint that already holds every planned step makes it exit 0 at once.

Every flag defaults from the contract's environment variables (``docs/contract.md``), then
from a small built-in default. Exit status: 0 done or stopped by SIGTERM, 2 bad arguments
or an incompatible checkpoint, 1 any other error (including ``--fail-at-step``).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO

import torch

from .checkpoint import (
    PeriodicSaver,
    StopRequest,
    TrainingPosition,
    apply_checkpoint,
    checkpoint_path,
    read_checkpoint,
    save_checkpoint,
    stop_on_signals,
)
from .reporter import (
    DEFAULT_BIND_ADDRESS,
    DEFAULT_METRICS_PORT,
    ENV_CHECKPOINT_DIR,
    ENV_EPOCHS,
    ENV_METRICS_ADDRESS,
    ENV_METRICS_LINGER_S,
    ENV_METRICS_PORT,
    ENV_PROGRESS_FILE,
    ENV_STEPS_PER_EPOCH,
    ProgressReporter,
)
from .threads import ThreadFollower
from .workloads import WORKLOADS, WorkloadConfig, build_workload

log = logging.getLogger("decor_trainer.train")

DEFAULT_EPOCHS = 1
DEFAULT_STEPS_PER_EPOCH = 50
DEFAULT_BATCH_SIZE = 32
DEFAULT_WIDTH = 16
DEFAULT_CHECKPOINT_EVERY_S = 60.0
"""Seconds between periodic checkpoints: at most this much work is lost to a SIGKILL."""

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

# Configuration that must match to resume from a checkpoint: anything else changes the
# model's shapes or the data of a step. Epochs and steps per epoch may change.
RESUME_KEYS = ("name", "width", "batch_size", "seed", "vocab_size", "seq_len")


class UsageError(Exception):
    """Arguments or environment that cannot work; reported with exit status 2."""


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _port(text: str) -> int:
    value = _int_at_least(0)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0..65535, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command line; defaults of None are filled from the environment by parse_args."""
    p = argparse.ArgumentParser(
        prog="python -m decor_trainer.train",
        description="Train a DECOR reference workload with progress reporting and "
        "checkpoint/resume.",
    )
    p.add_argument("--workload", choices=WORKLOADS, default="resnet", help="model and data")
    p.add_argument(
        "--epochs",
        type=_int_at_least(1),
        help=f"epochs to run (default: ${ENV_EPOCHS} or {DEFAULT_EPOCHS})",
    )
    p.add_argument(
        "--steps-per-epoch",
        type=_int_at_least(1),
        help=f"mini-batches per epoch (default: ${ENV_STEPS_PER_EPOCH} or "
        f"{DEFAULT_STEPS_PER_EPOCH})",
    )
    p.add_argument(
        "--batch-size",
        type=_int_at_least(1),
        default=DEFAULT_BATCH_SIZE,
        help="samples per mini-batch (default: %(default)s)",
    )
    p.add_argument(
        "--width",
        type=_int_at_least(1),
        default=DEFAULT_WIDTH,
        help="base channels of the CNNs (64 = paper size) or hidden size of the LM "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--vocab-size",
        type=_int_at_least(2),
        default=1000,
        help="LM vocabulary (lstm only; default: %(default)s)",
    )
    p.add_argument(
        "--seq-len",
        type=_int_at_least(1),
        default=35,
        help="LM tokens per sequence (lstm only; default: %(default)s)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of weights and data (default: %(default)s)"
    )
    p.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="auto = cuda if available, else cpu (default: %(default)s)",
    )
    p.add_argument(
        "--threads",
        type=_int_at_least(1),
        help="PyTorch intra-op threads, fixed (default: follow the CPU limit: its whole "
        "cores, at least 1, at most the CPUs in the affinity mask, re-read about once a "
        "second while training, since DECOR resizes the limit; see decor_trainer.threads)",
    )
    p.add_argument(
        "--checkpoint-dir",
        help=f"save and resume <dir>/checkpoint.pt (default: ${ENV_CHECKPOINT_DIR}; "
        "none = no checkpoints)",
    )
    p.add_argument(
        "--checkpoint-every-s",
        type=_seconds,
        default=DEFAULT_CHECKPOINT_EVERY_S,
        help="seconds between periodic checkpoints, 0 = only on SIGTERM and at the end "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--metrics-port",
        type=_port,
        help=f"port of the in-process /metrics endpoint, 0 = any free port (default: "
        f"${ENV_METRICS_PORT} or {DEFAULT_METRICS_PORT})",
    )
    p.add_argument(
        "--metrics-linger-s",
        type=float,
        help=f"after the last step, keep serving /metrics this long or until SIGTERM "
        f"(default: ${ENV_METRICS_LINGER_S} or 0)",
    )
    p.add_argument(
        "--metrics-address",
        help=f"bind address of the endpoint (default: ${ENV_METRICS_ADDRESS} or "
        f"{DEFAULT_BIND_ADDRESS})",
    )
    p.add_argument(
        "--progress-file",
        help=f"write this progress file for the sidecar instead of serving /metrics "
        f"(default: ${ENV_PROGRESS_FILE})",
    )
    p.add_argument(
        "--fail-at-step",
        type=_int_at_least(0),
        help="TEST HOOK: raise an error instead of running this global step (exit 1)",
    )
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="use only deterministic kernels (on CUDA a resumed run then matches an "
        "uninterrupted one bit for bit, at some speed cost; CPU runs with a fixed --threads "
        "are deterministic anyway)",
    )
    p.add_argument(
        "--step-log",
        help="TEST HOOK: append each completed global step's index to this file, one a line",
    )
    return p


def _from_env(
    environ: Mapping[str, str], name: str, parse: Callable[[str], int], default: int
) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return parse(raw)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{name}={raw!r}: {exc}") from None


def parse_args(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> argparse.Namespace:
    """Flags over environment over defaults. Exits with status 2 on bad values."""
    env = os.environ if environ is None else environ
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.epochs is None:
            args.epochs = _from_env(env, ENV_EPOCHS, _int_at_least(1), DEFAULT_EPOCHS)
        if args.steps_per_epoch is None:
            args.steps_per_epoch = _from_env(
                env, ENV_STEPS_PER_EPOCH, _int_at_least(1), DEFAULT_STEPS_PER_EPOCH
            )
        if args.metrics_port is None:
            args.metrics_port = _from_env(env, ENV_METRICS_PORT, _port, DEFAULT_METRICS_PORT)
    except UsageError as exc:
        parser.error(str(exc))
    if args.checkpoint_dir is None:
        args.checkpoint_dir = env.get(ENV_CHECKPOINT_DIR, "").strip() or None
    if args.progress_file is None:
        args.progress_file = env.get(ENV_PROGRESS_FILE, "").strip() or None
    if args.metrics_linger_s is None:
        raw = env.get(ENV_METRICS_LINGER_S, "").strip()
        try:
            args.metrics_linger_s = float(raw) if raw else 0.0
        except ValueError:
            parser.error(f"${ENV_METRICS_LINGER_S} must be a number of seconds, got {raw!r}")
    if args.metrics_address is None:
        args.metrics_address = env.get(ENV_METRICS_ADDRESS, "").strip() or DEFAULT_BIND_ADDRESS
    return args


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the trainer; return the process exit status (see the module docstring)."""
    args = parse_args(argv, environ)
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s decor-trainer %(message)s", stream=sys.stderr
        )
    try:
        # Installed before the (possibly long) set-up: a SIGTERM then still ends in exit 0.
        with stop_on_signals() as stop:
            return train(args, stop)
    except UsageError as exc:
        log.error("error: %s", exc)
        return EXIT_USAGE


def _resolve_device(requested: str) -> torch.device:
    if requested == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda, but PyTorch sees no CUDA device")
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(requested)


def train(args: argparse.Namespace, stop: StopRequest | None = None) -> int:
    """The training loop for parsed arguments; returns the exit status.

    The loop ends early, after a checkpoint, once ``stop.requested`` is set (by SIGTERM).
    """
    stop = stop if stop is not None else StopRequest()
    # A fixed --threads, or threads that follow the CPU limit (re-read between steps).
    follower = None
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    else:
        follower = ThreadFollower(torch.set_num_threads)
        follower.poll()
    device = _resolve_device(args.device)
    if args.deterministic:
        # cuBLAS needs a fixed workspace to be deterministic; read when CUDA initialises.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    config = WorkloadConfig(
        name=args.workload,
        width=args.width,
        batch_size=args.batch_size,
        seed=args.seed,
        vocab_size=args.vocab_size,
        seq_len=args.seq_len,
    )
    workload = build_workload(config)
    model = workload.model.to(device)
    model.train()
    optimizer = workload.optimizer()
    steps_per_epoch = args.steps_per_epoch
    steps_planned = args.epochs * steps_per_epoch
    meta = {"workload": config.as_dict()}

    ckpt = checkpoint_path(args.checkpoint_dir) if args.checkpoint_dir else None
    position = TrainingPosition()
    if ckpt is not None:
        existing = read_checkpoint(ckpt)
        if existing is not None:
            saved = existing.get("meta", {}).get("workload", {})
            mismatched = [k for k in RESUME_KEYS if saved.get(k) != getattr(config, k)]
            if mismatched:
                raise UsageError(
                    f"checkpoint {ckpt} was written for a different workload "
                    f"({', '.join(f'{k}={saved.get(k)!r}' for k in mismatched)}; now "
                    f"{', '.join(f'{k}={getattr(config, k)!r}' for k in mismatched)}); "
                    "use another --checkpoint-dir or delete it"
                )
            position = apply_checkpoint(existing, model=model, optimizer=optimizer)
            del existing
            log.info(
                "resumed from %s at step %d/%d (epoch %d)",
                ckpt,
                position.step,
                steps_planned,
                position.epoch,
            )
    if position.step >= steps_planned:
        log.info(
            "checkpoint already holds %d/%d steps: nothing to do", position.step, steps_planned
        )
        return EXIT_OK

    def save(reason: str) -> bool:
        if ckpt is None:
            return True
        started = time.monotonic()
        try:
            save_checkpoint(ckpt, model=model, optimizer=optimizer, position=position, meta=meta)
        except Exception as exc:  # noqa: BLE001 - a failed save must not kill the run
            log.error("checkpoint (%s) at step %d failed: %r", reason, position.step, exc)
            return False
        log.log(
            logging.DEBUG if reason == "periodic" else logging.INFO,
            "checkpoint (%s) at step %d saved in %.3f s",
            reason,
            position.step,
            time.monotonic() - started,
        )
        return True

    step_log: IO[str] | None = open(args.step_log, "a") if args.step_log else None  # noqa: SIM115
    reporter = ProgressReporter(
        steps_planned=steps_planned,
        epochs_planned=args.epochs,
        start_step=position.step,
        start_samples=position.samples,
        start_epoch=position.epoch,
        port=None if args.progress_file else args.metrics_port,
        address=args.metrics_address,
        progress_file=args.progress_file,
    )
    log.info(
        "training %s (width %d, batch %d) for %d epochs x %d steps on %s with %s threads",
        config.name,
        config.width,
        config.batch_size,
        args.epochs,
        steps_per_epoch,
        device,
        args.threads if follower is None else f"{follower.threads} (following the CPU limit)",
    )
    saver = PeriodicSaver(args.checkpoint_every_s)
    epoch_started = time.monotonic()
    epoch_loss, epoch_steps = 0.0, 0
    try:
        with reporter:
            for step in range(position.step, steps_planned):
                if stop.requested:
                    break
                if follower is not None:
                    before = follower.threads
                    if follower.poll() != before:
                        log.info(
                            "CPU limit changed: %d threads from step %d", follower.threads, step
                        )
                if args.fail_at_step is not None and step == args.fail_at_step:
                    raise RuntimeError(f"--fail-at-step {step}: failing on purpose (test hook)")
                inputs, targets = workload.batch(step)
                inputs, targets = inputs.to(device), targets.to(device)
                optimizer.zero_grad(set_to_none=True)
                loss = workload.loss(model(inputs), targets)
                loss.backward()
                workload.clip_gradients()
                optimizer.step()
                # .item() waits for the device, so the step's wall time is honest on CUDA.
                epoch_loss += loss.item()
                epoch_steps += 1
                position = TrainingPosition(
                    step=step + 1,
                    epoch=(step + 1) // steps_per_epoch,
                    samples=position.samples + workload.samples_per_step,
                )
                reporter.step_done(workload.samples_per_step)
                if step_log is not None:
                    step_log.write(f"{step}\n")
                    step_log.flush()
                if position.step % steps_per_epoch == 0:
                    reporter.epoch_done()
                    now = time.monotonic()
                    log.info(
                        "epoch %d/%d done: step %d/%d, %.2f s, mean loss %.4f",
                        position.epoch,
                        args.epochs,
                        position.step,
                        steps_planned,
                        now - epoch_started,
                        epoch_loss / max(1, epoch_steps),
                    )
                    epoch_started, epoch_loss, epoch_steps = now, 0.0, 0
                if saver.due() and save("periodic"):
                    saver.saved()
            if not stop.requested and reporter.port is not None and args.metrics_linger_s > 0:
                # Keep /metrics up a moment (or until SIGTERM) so that a controller sees the
                # final step and its time stamp before the process is gone.
                linger_until = time.monotonic() + args.metrics_linger_s
                while not stop.requested and time.monotonic() < linger_until:
                    time.sleep(0.02)
                stop = StopRequest()  # a SIGTERM that only ended the linger is not a stop
            if stop.requested:
                log.info(
                    "signal %s: stopping at step %d/%d",
                    stop.signal_number,
                    position.step,
                    steps_planned,
                )
                if ckpt is None:
                    log.warning("no --checkpoint-dir: the progress of this run is lost")
                return EXIT_OK if save("stop") else EXIT_ERROR
    finally:
        if step_log is not None:
            step_log.close()
    ok = save("final")
    log.info("done: %d/%d steps", position.step, steps_planned)
    return EXIT_OK if ok else EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
