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
import contextlib
import functools
import json
import logging
import os
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch
from torch.nn.parallel import DistributedDataParallel

from .checkpoint import (
    PeriodicSaver,
    StopRequest,
    TrainingPosition,
    apply_checkpoint,
    checkpoint_path,
    read_checkpoint,
    restart_seconds,
    save_checkpoint,
    saved_at_s,
    stop_on_signals,
)
from .contract import (
    DEFAULT_METRICS_PORT,
    ENV_BATCH_POLICY,
    ENV_CHECKPOINT_DIR,
    ENV_EPOCHS,
    ENV_METRICS_ADDRESS,
    ENV_METRICS_LINGER_S,
    ENV_METRICS_PORT,
    ENV_PROGRESS_FILE,
    ENV_STEPS_PER_EPOCH,
    ENV_WORKERS,
)
from .distributed import (
    BATCH_POLICIES,
    DEFAULT_BATCH_POLICY,
    DEFAULT_LR_WARMUP_STEPS,
    BatchPolicy,
    DataOrder,
    PodWorld,
    WorldInfo,
    close_process_group,
    gather_from_all,
    init_process_group,
    launch_workers,
    reduce_step,
    shard_indices,
    unblock_stop_signals,
    worker_count,
)
from .reporter import DEFAULT_BIND_ADDRESS, ProgressReporter
from .threads import CpuLimitReader, ThreadFollower, usable_cpus
from .workloads import WORKLOADS, Workload, WorkloadConfig, build_workload

log = logging.getLogger("decor_trainer.train")

DEFAULT_EPOCHS = 1
DEFAULT_STEPS_PER_EPOCH = 50
DEFAULT_BATCH_SIZE = 32
DEFAULT_WIDTH = 16
DEFAULT_CHECKPOINT_EVERY_S = 60.0
"""Seconds between periodic checkpoints: at most this much work is lost to a SIGKILL."""

ENV_TERMINATION_LOG = "DECOR_TERMINATION_LOG"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
"""Where the trainer leaves ``steps=DONE/PLANNED`` when it exits (docs/contract.md)."""

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
    _add_workload_flags(p)
    _add_device_flags(p)
    _add_checkpoint_flags(p)
    _add_progress_flags(p)
    _add_failure_hooks(p)
    _add_data_parallel_flags(p)
    _add_test_logs(p)
    return p


def _add_workload_flags(p: argparse.ArgumentParser) -> None:
    """The workload, its size and length, and its seed."""
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


def _add_device_flags(p: argparse.ArgumentParser) -> None:
    """Where the steps run: the device and its CPU threads."""
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


def _add_checkpoint_flags(p: argparse.ArgumentParser) -> None:
    """Where and how often to checkpoint."""
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


def _add_progress_flags(p: argparse.ArgumentParser) -> None:
    """How progress is reported: the /metrics endpoint or the progress file."""
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


def _add_failure_hooks(p: argparse.ArgumentParser) -> None:
    """TEST HOOKS that make the trainer fail, end early or hang at a step."""
    p.add_argument(
        "--fail-at-step",
        type=_int_at_least(0),
        help="TEST HOOK: raise an error instead of running this global step (exit 1)",
    )
    p.add_argument(
        "--exit-at-step",
        type=_int_at_least(1),
        help="TEST HOOK: checkpoint and exit 0 before running this global step (a trainer "
        "that ends early); a run resumed at that step does not exit again",
    )
    p.add_argument(
        "--hang-at-step",
        type=_int_at_least(1),
        help="TEST HOOK: stop completing steps at this global step (until SIGTERM)",
    )


def _add_data_parallel_flags(p: argparse.ArgumentParser) -> None:
    """Determinism, workers, and how the batch and the data follow them."""
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="use only deterministic kernels (on CUDA a resumed run then matches an "
        "uninterrupted one bit for bit, at some speed cost; CPU runs with a fixed --threads "
        "are deterministic anyway)",
    )
    p.add_argument(
        "--workers",
        type=_int_at_least(1),
        help=f"worker processes (data-parallel, rank 0 reports and checkpoints; default: one "
        f"per visible CUDA device, else ${ENV_WORKERS}, else 1)",
    )
    p.add_argument(
        "--batch-policy",
        choices=BATCH_POLICIES,
        help=f"fixed-global: --batch-size is the global batch, split across the workers; "
        f"scale-with-workers: --batch-size per worker, learning rate x workers after a warm-up "
        f"(default: ${ENV_BATCH_POLICY} or {DEFAULT_BATCH_POLICY}; docs/distributed.md)",
    )
    p.add_argument(
        "--micro-batch",
        type=_int_at_least(1),
        help="most samples one worker puts through the model at once; above it the worker "
        "accumulates gradients (default: no cap)",
    )
    p.add_argument(
        "--lr-warmup-steps",
        type=_int_at_least(0),
        default=DEFAULT_LR_WARMUP_STEPS,
        help="scale-with-workers: steps over which the learning rate ramps to its new scale "
        "after a start or a change of workers (default: %(default)s)",
    )
    p.add_argument(
        "--dataset-size",
        type=_int_at_least(1),
        help="samples in the synthetic dataset, visited in a seeded order, one permutation "
        "per pass (default: steps per epoch x batch size; a checkpoint's value wins)",
    )


def _add_test_logs(p: argparse.ArgumentParser) -> None:
    """TEST HOOKS that log each step's samples, loss and index."""
    p.add_argument(
        "--sample-log",
        help="TEST HOOK: every worker appends the sample indices of each pass, one JSON "
        "object a line",
    )
    p.add_argument(
        "--loss-log",
        help="TEST HOOK: append each global step's mean loss over the global batch "
        "('step loss' lines)",
    )
    p.add_argument(
        "--step-log",
        help="TEST HOOK: append each completed global step's index to this file, one a line",
    )


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
    if args.batch_policy is None:
        raw = env.get(ENV_BATCH_POLICY, "").strip() or DEFAULT_BATCH_POLICY
        if raw not in BATCH_POLICIES:
            parser.error(f"${ENV_BATCH_POLICY}={raw!r}: choose one of {', '.join(BATCH_POLICIES)}")
        args.batch_policy = raw
    if args.metrics_address is None:
        args.metrics_address = env.get(ENV_METRICS_ADDRESS, "").strip() or DEFAULT_BIND_ADDRESS
    return args


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the trainer; return the process exit status (see the module docstring).

    With more than one worker in the world (this pod's,
    :func:`decor_trainer.distributed.worker_count`, and other pods',
    :class:`decor_trainer.distributed.PodWorld`) this process launches this pod's workers and
    waits; a process started as a rank (by ``torchrun`` or the launcher) trains as that rank.
    """
    env = os.environ if environ is None else environ
    args = parse_args(argv, env)
    _configure_logging()
    try:
        world = WorldInfo.from_env(env)
        if world is None:
            cuda_devices = torch.cuda.device_count() if args.device != "cpu" else 0
            try:
                pod = PodWorld.from_env(worker_count(args.workers, env, cuda_devices), env)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            if pod.world_size > 1:  # even one worker: it joins the other pods' workers
                log.info("running %d of the %d workers in this pod", pod.workers, pod.world_size)
                return launch_workers(functools.partial(_worker_entry, args), pod)
        # Installed before the (possibly long) set-up: a SIGTERM then still ends in exit 0.
        with stop_on_signals() as stop:
            return train(args, stop, world)
    except UsageError as exc:
        log.error("error: %s", exc)
        return EXIT_USAGE


def _configure_logging() -> None:
    if not logging.getLogger().handlers:
        rank = os.environ.get("RANK")
        prefix = f"decor-trainer[{rank}]" if rank is not None else "decor-trainer"
        logging.basicConfig(
            level=logging.INFO, format=f"%(asctime)s {prefix} %(message)s", stream=sys.stderr
        )


def _worker_entry(args: argparse.Namespace) -> int:
    """One worker started by :func:`launch_workers` (rank from the environment)."""
    _configure_logging()
    try:
        with stop_on_signals() as stop:
            unblock_stop_signals()
            return train(args, stop, WorldInfo.from_env(os.environ))
    except UsageError as exc:
        log.error("error: %s", exc)
        return EXIT_USAGE


def _resolve_device(requested: str, world: WorldInfo) -> torch.device:
    if requested == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda, but PyTorch sees no CUDA device")
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda":
        # One process per GPU: local rank i drives the i-th visible device.
        if world.local_rank >= torch.cuda.device_count():
            raise UsageError(
                f"local rank {world.local_rank}, but only {torch.cuda.device_count()} CUDA "
                "devices are visible"
            )
        torch.cuda.set_device(world.local_rank)
        return torch.device("cuda", world.local_rank)
    return torch.device(requested)


def _per_worker(value: float | None, workers: int) -> float | None:
    return None if value is None else value / workers


class _SampleLog:
    """TEST HOOK: every worker appends ``{"step", "rank", "world", "indices"}`` JSON lines to
    one file (one ``write`` per line on an ``O_APPEND`` descriptor: lines never interleave)."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, step: int, rank: int, world: int, indices: Sequence[int]) -> None:
        line = {"step": step, "rank": rank, "world": world, "indices": list(indices)}
        os.write(self._fd, (json.dumps(line) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


def train(
    args: argparse.Namespace, stop: StopRequest | None = None, world: WorldInfo | None = None
) -> int:
    """The training loop for parsed arguments; returns the exit status.

    ``world`` is this worker's rank (None = the only worker). The loop ends early, after a
    checkpoint, once ``stop.requested`` is set (by SIGTERM) on any worker.
    """
    stop = stop if stop is not None else StopRequest()
    world = world if world is not None else WorldInfo()
    try:
        status = _train(args, stop, world)
    except BaseException:
        close_process_group()  # the others may be gone: no waiting for them
        raise
    close_process_group(status)
    return status


def _train(args: argparse.Namespace, stop: StopRequest, world: WorldInfo) -> int:
    """Set up, resume, run the steps, finish: the steps below, in this order."""
    follower = _thread_follower(args.threads, world)
    device = _resolve_device(args.device, world)
    if args.deterministic:
        _use_deterministic_kernels()
    run = _build_run(args, stop, world, device, _batch_policy(args, world), follower)
    init_process_group(world, device)
    _check_same_position(run.position, args.checkpoint_dir, world, device)
    if run.position.step >= run.steps_planned:
        log.info(
            "checkpoint already holds %d/%d steps: nothing to do",
            run.position.step,
            run.steps_planned,
        )
        _tell_termination(run)
        return EXIT_OK
    _wrap_data_parallel(run)
    return _run_steps(run, _TestLogs.open(args, world.is_main), _reporter(run))


def _thread_follower(threads: int | None, world: WorldInfo) -> ThreadFollower | None:
    """A fixed ``--threads`` (None returned), or threads that follow the CPU limit, re-read
    between steps; the workers of a pod share its limit and its CPUs."""
    if threads is not None:
        torch.set_num_threads(threads)
        return None
    shares, read_limit = world.local_world_size, CpuLimitReader()
    follower = ThreadFollower(
        torch.set_num_threads,
        read_limit=lambda: _per_worker(read_limit(), shares),
        read_cpus=lambda: max(1, usable_cpus() // shares),
    )
    follower.poll()
    return follower


def _use_deterministic_kernels() -> None:
    """``--deterministic``: only deterministic kernels, cuDNN autotuning off."""
    # cuBLAS needs a fixed workspace to be deterministic; read when CUDA initialises.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True)


def _batch_policy(args: argparse.Namespace, world: WorldInfo) -> BatchPolicy:
    """How the batch follows the world size; a policy that cannot work is a usage error."""
    try:
        return BatchPolicy(
            args.batch_policy,
            args.batch_size,
            world.world_size,
            micro_batch=args.micro_batch,
            lr_warmup_steps=args.lr_warmup_steps,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


@dataclass
class _Run:
    """One worker's training run: what set-up built (first block) and where it stands
    (second block, updated step by step; ``position`` is what a checkpoint saves)."""

    args: argparse.Namespace
    stop: StopRequest
    world: WorldInfo
    device: torch.device
    policy: BatchPolicy
    follower: ThreadFollower | None
    config: WorkloadConfig
    workload: Workload
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    base_lrs: list[float]
    """Each parameter group's learning rate as the workload made it (scale 1)."""
    ckpt: Path | None
    """``<checkpoint-dir>/checkpoint.pt``, or None without checkpoints."""
    order: DataOrder
    position: TrainingPosition = field(default_factory=TrainingPosition)
    start_lr_scale: float = 1.0
    """Learning-rate scale the resumed checkpoint was written with (1 on a fresh start)."""
    resumed_from: dict[str, float | None] | None = None
    """``{"saved_at_s": ...}`` until the first step after a resume is done, else None."""
    ddp: DistributedDataParallel | None = None
    """The model wrapped for data-parallel training (several workers), else None."""
    start_step: int = 0
    lr_scale: float = 1.0
    stopping: bool = False
    """Some worker was asked to stop: the run ends after the step in hand, with a checkpoint."""

    @property
    def steps_planned(self) -> int:
        return int(self.args.epochs * self.args.steps_per_epoch)


def _build_run(
    args: argparse.Namespace,
    stop: StopRequest,
    world: WorldInfo,
    device: torch.device,
    policy: BatchPolicy,
    follower: ThreadFollower | None,
) -> _Run:
    """Seed, build the workload's model and optimizer on ``device``, resume if a checkpoint
    is there."""
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
    run = _Run(
        args=args,
        stop=stop,
        world=world,
        device=device,
        policy=policy,
        follower=follower,
        config=config,
        workload=workload,
        model=model,
        optimizer=optimizer,
        base_lrs=[float(group["lr"]) for group in optimizer.param_groups],
        ckpt=checkpoint_path(args.checkpoint_dir) if args.checkpoint_dir else None,
        order=DataOrder(args.seed, args.dataset_size or args.steps_per_epoch * args.batch_size),
    )
    existing = read_checkpoint(run.ckpt) if run.ckpt is not None else None
    if existing is not None:
        _resume(run, existing)
    return run


def _resume(run: _Run, existing: dict[str, Any]) -> None:
    """Take position, data order, learning-rate scale, weights and optimizer state from a
    checkpoint written for the same workload (else a usage error)."""
    saved = existing.get("meta", {}).get("workload", {})
    mismatched = [k for k in RESUME_KEYS if saved.get(k) != getattr(run.config, k)]
    if mismatched:
        raise UsageError(
            f"checkpoint {run.ckpt} was written for a different workload "
            f"({', '.join(f'{k}={saved.get(k)!r}' for k in mismatched)}; now "
            f"{', '.join(f'{k}={getattr(run.config, k)!r}' for k in mismatched)}); "
            "use another --checkpoint-dir or delete it"
        )
    saved_order = existing.get("data_order") or {}
    if saved_order:
        run.order = DataOrder(int(saved_order["seed"]), int(saved_order["dataset_size"]))
    saved_batch = existing.get("meta", {}).get("batch", {})
    run.start_lr_scale = float(saved_batch.get("lr_scale", 1.0))
    run.resumed_from = {"saved_at_s": saved_at_s(existing)}
    run.position = apply_checkpoint(existing, model=run.model, optimizer=run.optimizer)
    log.info(
        "resumed from %s at step %d/%d (epoch %d, sample %d) with %d workers "
        "(checkpoint written with %s)",
        run.ckpt,
        run.position.step,
        run.steps_planned,
        run.position.epoch,
        run.position.samples,
        run.world.world_size,
        saved_batch.get("world_size", 1),
    )


def _wrap_data_parallel(run: _Run) -> None:
    """With several workers, wrap the model in DDP: it broadcasts rank 0's parameters and
    buffers and averages gradients in backward."""
    if run.world.world_size > 1:
        run.ddp = DistributedDataParallel(
            run.model, device_ids=[run.device.index] if run.device.type == "cuda" else None
        )


def _save(run: _Run, reason: str) -> bool:
    """Rank 0 checkpoints the run's position (``reason``: periodic, stop or final); True when
    saved or nothing to save, False when the save failed (logged; the run goes on)."""
    if run.ckpt is None or not run.world.is_main:
        return True
    started = time.monotonic()
    meta = {
        "workload": run.config.as_dict(),
        "batch": {
            "policy": run.policy.policy,
            "world_size": run.world.world_size,
            "global_batch": run.policy.global_batch,
            "lr_scale": run.lr_scale,
        },
    }
    try:
        save_checkpoint(
            run.ckpt,
            model=run.model,
            optimizer=run.optimizer,
            position=run.position,
            meta=meta,
            data_order={"seed": run.order.seed, "dataset_size": run.order.dataset_size},
        )
    except Exception as exc:  # noqa: BLE001 - a failed save must not kill the run
        log.error("checkpoint (%s) at step %d failed: %r", reason, run.position.step, exc)
        return False
    log.log(
        logging.DEBUG if reason == "periodic" else logging.INFO,
        "checkpoint (%s) at step %d saved in %.3f s",
        reason,
        run.position.step,
        time.monotonic() - started,
    )
    return True


@dataclass
class _TestLogs:
    """TEST HOOK files: ``--step-log`` and ``--loss-log`` (rank 0 only), ``--sample-log``."""

    step_log: IO[str] | None
    loss_log: IO[str] | None
    sample_log: _SampleLog | None

    @classmethod
    def open(cls, args: argparse.Namespace, main_rank: bool) -> _TestLogs:
        return cls(
            step_log=open(args.step_log, "a") if args.step_log and main_rank else None,  # noqa: SIM115
            loss_log=open(args.loss_log, "a") if args.loss_log and main_rank else None,  # noqa: SIM115
            sample_log=_SampleLog(args.sample_log) if args.sample_log else None,
        )

    def step_done(self, step: int, step_loss: float) -> None:
        """Global step ``step`` done with mean loss ``step_loss``."""
        if self.step_log is not None:
            self.step_log.write(f"{step}\n")
            self.step_log.flush()
        if self.loss_log is not None:
            self.loss_log.write(f"{step} {step_loss!r}\n")
            self.loss_log.flush()

    def close(self) -> None:
        for handle in (self.step_log, self.loss_log, self.sample_log):
            if handle is not None:
                handle.close()


def _reporter(run: _Run) -> ProgressReporter | None:
    """Rank 0's progress reporter: the progress file, else the in-process /metrics. It says
    that the threads follow the CPU limit where one worker's threads do (no ``--threads``):
    with several workers in the pod each runs whole cores of its share, and the pod's limit
    between whole cores can add a thread."""
    if not run.world.is_main:
        return None
    args = run.args
    return ProgressReporter(
        steps_planned=run.steps_planned,
        epochs_planned=args.epochs,
        start_step=run.position.step,
        start_samples=run.position.samples,
        start_epoch=run.position.epoch,
        port=None if args.progress_file else args.metrics_port,
        address=args.metrics_address,
        progress_file=args.progress_file,
        threads_follow_limit=run.follower is not None and run.world.local_world_size == 1,
    )


def _log_start(run: _Run) -> None:
    policy, follower = run.policy, run.follower
    log.info(
        "training %s (width %d, %s batch: %d global, %d accumulation round(s)) for %d epochs "
        "x %d steps on %s (rank %d/%d) with %s threads",
        run.config.name,
        run.config.width,
        policy.policy,
        policy.global_batch,
        policy.accumulation_rounds,
        run.args.epochs,
        run.args.steps_per_epoch,
        run.device,
        run.world.rank,
        run.world.world_size,
        run.args.threads if follower is None else f"{follower.threads} (following the CPU limit)",
    )


@dataclass
class _EpochTally:
    """The epoch in progress: its start (monotonic seconds) and the sum of its step losses."""

    started: float
    loss: float = 0.0
    steps: int = 0


def _run_steps(run: _Run, logs: _TestLogs, reporter: ProgressReporter | None) -> int:
    """The steps from the run's position to the plan, then the final checkpoint; returns the
    exit status (a test hook or a stop may end the run early)."""
    _log_start(run)
    run.start_step, run.lr_scale = run.position.step, run.start_lr_scale
    saver = PeriodicSaver(run.args.checkpoint_every_s)
    epoch = _EpochTally(started=time.monotonic())
    run.stopping = reduce_step(0.0, run.stop.requested, run.device)[1]
    try:
        with reporter if reporter is not None else contextlib.nullcontext():
            for step in range(run.position.step, run.steps_planned):
                if run.stopping:
                    break
                status = _before_step(run, step)
                if status is not None:
                    return status
                if run.stopping:  # --hang-at-step, then a stop
                    break
                step_loss = _one_step(run, step, logs.sample_log)
                _after_step(run, step, step_loss, reporter, logs, epoch)
                if run.world.is_main and saver.due() and _save(run, "periodic"):
                    saver.saved()
            if not run.stopping and reporter is not None:
                # Keep /metrics up a moment (or until SIGTERM) so that a controller sees the
                # final step and its time stamp before the process is gone.
                reporter.linger(run.args.metrics_linger_s, lambda: run.stop.requested)
            if run.stopping:
                return _stop(run)
    finally:
        logs.close()
    ok = _save(run, "final")
    if run.world.is_main:
        log.info("done: %d/%d steps", run.position.step, run.steps_planned)
    _tell_termination(run)
    return EXIT_OK if ok else EXIT_ERROR


def _tell_termination(run: _Run) -> None:
    """Every rank holds the global position: each pod's first worker leaves it in the pod's
    termination message, so that every pod of a world that spans pods tells it."""
    if run.world.local_rank == 0:
        write_termination_message(run.position.step, run.steps_planned)


def _before_step(run: _Run, step: int) -> int | None:
    """Follow the CPU limit, then the test hooks: an exit status to return now, or None to
    go on (``run.stopping`` set: stop without running ``step``)."""
    follower, args = run.follower, run.args
    if follower is not None:
        before = follower.threads
        if follower.poll() != before:
            log.info("CPU limit changed: %d threads from step %d", follower.threads, step)
    if args.fail_at_step is not None and step == args.fail_at_step:
        raise RuntimeError(f"--fail-at-step {step}: failing on purpose (test hook)")
    if args.exit_at_step == step and step > run.start_step:
        log.info("--exit-at-step %d: exiting 0 early on purpose (test hook)", step)
        ok = _save(run, "stop")
        _tell_termination(run)
        return EXIT_OK if ok else EXIT_ERROR
    if args.hang_at_step == step:
        log.info("--hang-at-step %d: completing no more steps (test hook)", step)
        while not run.stop.requested:
            time.sleep(0.1)
        run.stopping = True
    return None


def _one_step(run: _Run, step: int, sample_log: _SampleLog | None) -> float:
    """Global step ``step``: set the learning rate, put this rank's shards through the model
    (accumulating gradients), step the optimizer, agree on loss and stop with every worker.
    Advances ``run.position``; returns the step's mean loss over the global batch."""
    policy, world = run.policy, run.world
    net = run.model if run.ddp is None else run.ddp
    run.lr_scale = policy.lr_scale_at(step, run.start_step, run.start_lr_scale)
    for group, base_lr in zip(run.optimizer.param_groups, run.base_lrs, strict=True):
        group["lr"] = base_lr * run.lr_scale
    shards = shard_indices(
        run.order.indices(run.position.samples, policy.global_batch), policy, world.rank
    )
    run.optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for number, shard in enumerate(shards):
        inputs, targets = run.workload.samples(shard.indices)
        inputs, targets = inputs.to(run.device), targets.to(run.device)
        # Gradients are averaged across workers only on the last round.
        last = number == len(shards) - 1
        with _no_sync(run.ddp) if not last else contextlib.nullcontext():
            loss = run.workload.loss(net(inputs), targets)
            (loss * shard.loss_weight).backward()
        # .item() waits for the device, so the step's wall time is honest on CUDA.
        loss_sum += loss.item() * len(shard.indices)
        if sample_log is not None:
            sample_log.write(step, world.rank, world.world_size, shard.indices)
    run.workload.clip_gradients()
    run.optimizer.step()
    loss_sum, run.stopping = reduce_step(loss_sum, run.stop.requested, run.device)
    run.position = TrainingPosition(
        step=step + 1,
        epoch=(step + 1) // run.args.steps_per_epoch,
        samples=run.position.samples + policy.global_batch,
    )
    return loss_sum / policy.global_batch


def _after_step(
    run: _Run,
    step: int,
    step_loss: float,
    reporter: ProgressReporter | None,
    logs: _TestLogs,
    epoch: _EpochTally,
) -> None:
    """Report the done step (and the restart cost after a resume), log it, close an epoch."""
    epoch.loss += step_loss
    epoch.steps += 1
    if reporter is not None:
        reporter.step_done(run.policy.global_batch)
    if run.resumed_from is not None and run.world.is_main:
        restart_s = restart_seconds(run.resumed_from, time.time())
        if restart_s is not None:
            log.info("restart cost %.3f s (checkpoint saved -> first step done)", restart_s)
            if reporter is not None:
                reporter.restart_done(restart_s)
        run.resumed_from = None
    logs.step_done(step, step_loss)
    if run.position.step % run.args.steps_per_epoch == 0:
        if reporter is not None:
            reporter.epoch_done()
        _epoch_done(run, epoch)


def _epoch_done(run: _Run, epoch: _EpochTally) -> None:
    """Log the epoch just completed (rank 0) and start the next one's tally."""
    now = time.monotonic()
    if run.world.is_main:
        log.info(
            "epoch %d/%d done: step %d/%d, %.2f s, mean loss %.4f",
            run.position.epoch,
            run.args.epochs,
            run.position.step,
            run.steps_planned,
            now - epoch.started,
            epoch.loss / max(1, epoch.steps),
        )
    epoch.started, epoch.loss, epoch.steps = now, 0.0, 0


def _stop(run: _Run) -> int:
    """A stop was requested: log it, tell the position, checkpoint; returns the exit status."""
    log.info(
        "signal %s: stopping at step %d/%d",
        run.stop.signal_number,
        run.position.step,
        run.steps_planned,
    )
    if run.ckpt is None and run.world.is_main:
        log.warning("no --checkpoint-dir: the progress of this run is lost")
    _tell_termination(run)
    return EXIT_OK if _save(run, "stop") else EXIT_ERROR


def _check_same_position(
    position: TrainingPosition, checkpoint_dir: str | None, world: WorldInfo, device: torch.device
) -> None:
    """Every rank read its own checkpoint; across pods a directory that is not shared would
    make ranks resume at different steps. All ranks compare positions and stop together."""
    positions = gather_from_all((position.step, position.samples), device)
    differing = [rank for rank, other in enumerate(positions) if other != positions[0]]
    if differing:
        step, samples = positions[0]
        raise UsageError(
            f"rank(s) {differing} would resume at another position than rank 0 (step {step}, "
            f"{samples} samples; this rank {world.rank}: step {position.step}, "
            f"{position.samples} samples): the checkpoint directory {checkpoint_dir} must be "
            "shared by every worker pod (one hostPath on one node, or a ReadWriteMany volume)"
        )


def write_termination_message(steps_done: int, steps_planned: int) -> None:
    """Leave ``steps=DONE/PLANNED`` in the container's termination message (Kubernetes shows
    it in ``status.containerStatuses[].state.terminated.message``), so that the operator can
    tell a trainer that finished from one that exited 0 early. Never fails training."""
    path = os.environ.get(ENV_TERMINATION_LOG, DEFAULT_TERMINATION_LOG)
    try:
        # r+ writes only where the runtime made the file (a container), never creates one
        with open(path, "r+", encoding="utf-8") as handle:
            handle.truncate()
            handle.write(f"steps={steps_done}/{steps_planned}\n")
    except OSError:
        pass  # not in a container, or no such file: nothing to tell


def _no_sync(ddp: DistributedDataParallel | None) -> contextlib.AbstractContextManager[None]:
    """DDP's ``no_sync()`` (keep this pass's gradients local), or nothing for one worker."""
    if ddp is None:
        return contextlib.nullcontext()
    no_sync: Callable[[], contextlib.AbstractContextManager[None]] = ddp.no_sync  # type: ignore[assignment]
    return no_sync()


if __name__ == "__main__":
    sys.exit(main())
