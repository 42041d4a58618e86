"""Data-parallel training over the devices of one pod or several: workers, sharding, batches.

DECOR changes a GPU job's ``nvidia.com/gpu`` count by checkpoint and restart. For the count to
matter, the trainer runs one worker process per device and trains with
``DistributedDataParallel`` (DDP): NCCL and ``cuda:<local rank>`` on GPUs, gloo on CPUs (the
test bed's fake GPUs are CPU worker processes). Rank 0 alone reports progress and writes
checkpoints; every rank runs the same global steps.

The pieces, each usable from your own training loop:

* :func:`worker_count`: how many workers (one per visible CUDA device; without CUDA, the
  ``DECOR_WORKERS`` count the operator sets to the allocated GPU count, else 1).
* :class:`PodWorld`: this pod's workers' place in the job's world, which may span several
  pods (``DECOR_WORLD_SIZE``, ``DECOR_RANK_OFFSET``) and where they meet (``MASTER_ADDR``,
  ``MASTER_PORT``).
* :func:`launch_workers`: start this pod's worker processes (``spawn``), forward SIGTERM
  to them, return the first failing exit status. A process already started as a rank by
  ``torchrun`` (``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` set) is not launched again:
  :meth:`WorldInfo.from_env` reads those variables.
* :class:`DataOrder`: the order in which samples are consumed, a pure function of
  ``(seed, dataset size)``: one permutation per pass over the data. A step consumes the next
  ``global_batch`` positions of that stream, so a checkpoint that stores the samples consumed
  so far resumes at the exact sample whatever the world size.
* :func:`shard_indices`: this rank's part of the global batch, in gradient-accumulation
  rounds, with the loss weight that makes DDP's gradient average equal the gradient of the
  mean loss over the whole global batch (uneven shares included).
* :class:`BatchPolicy`: ``fixed-global`` (the default: the global batch stays; per-worker
  batch = global / M) or ``scale-with-workers`` (per-worker batch stays, the global batch is
  per-worker x M, the learning rate scales linearly with M after a linear warm-up).

Units: batches and indices are sample counts; learning-rate scales are plain factors.
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import FrameType
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from .contract import (
    DEFAULT_MASTER_PORT,
    ENV_MASTER_ADDR,
    ENV_MASTER_PORT,
    ENV_RANK_OFFSET,
    ENV_WORKERS,
    ENV_WORLD_SIZE,
    POLICY_FIXED_GLOBAL,
    POLICY_SCALE_WITH_WORKERS,
)

if TYPE_CHECKING:
    from multiprocessing.sharedctypes import Synchronized

log = logging.getLogger(__name__)


BATCH_POLICIES = (POLICY_FIXED_GLOBAL, POLICY_SCALE_WITH_WORKERS)
DEFAULT_BATCH_POLICY = POLICY_FIXED_GLOBAL
DEFAULT_LR_WARMUP_STEPS = 50
"""Steps over which ``scale-with-workers`` ramps the learning-rate scale to its new value."""

PROCESS_GROUP_TIMEOUT_S = 300.0
"""How long a collective waits for a missing peer before failing (gloo and NCCL)."""
STOP_GRACE_S = 30.0
"""After one worker fails, how long the others get to exit before they are killed."""
TEARDOWN_GRACE_S = 30.0
"""Once every worker of the pod has ended its run with the others (:func:`close_process_group`
with a status), how long they get to tear the group down and exit before they are killed."""
NO_OUTCOME = -1
"""A launched worker's outcome before its run has ended with the others'."""
LOCALHOST = "127.0.0.1"
MAX_PORT = 65535
"""The highest TCP port number."""


# --- who am I ----------------------------------------------------------------------------


@dataclass(frozen=True)
class WorldInfo:
    """This process's place among the workers: ``rank`` in 0..world_size-1 over all pods,
    ``local_rank`` in 0..local_world_size-1 within the pod (the CUDA device index)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one worker that reports progress and writes checkpoints."""
        return self.rank == 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> WorldInfo | None:
        """The rank set by ``torchrun`` or :func:`launch_workers`; None if not launched so."""
        if "RANK" not in environ or "WORLD_SIZE" not in environ:
            return None
        world_size = int(environ["WORLD_SIZE"])
        local_world_size = int(environ.get("LOCAL_WORLD_SIZE", world_size))
        info = cls(
            rank=int(environ["RANK"]),
            world_size=world_size,
            local_rank=int(environ.get("LOCAL_RANK", environ["RANK"])),
            local_world_size=local_world_size,
        )
        if not (0 <= info.rank < world_size and 0 <= info.local_rank < local_world_size):
            raise ValueError(f"inconsistent rank environment: {info}")
        return info


def _env_int(
    environ: Mapping[str, str], name: str, minimum: int, maximum: int | None = None
) -> int | None:
    """The integer in ``$name`` (None when unset or empty); ValueError out of range."""
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: not an integer") from None
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise ValueError(f"{name}={raw!r}: must be {bounds}")
    return value


def worker_count(requested: int | None, environ: Mapping[str, str], cuda_devices: int) -> int:
    """Workers to run in this pod (>= 1).

    ``requested`` (the ``--workers`` flag) wins; it may not exceed the CUDA devices when there
    are any. Otherwise one worker per visible CUDA device (the device plugin exposes as many
    as the pod was given); without CUDA, ``$DECOR_WORKERS`` (the allocated GPU count on the
    CPU test bed), else 1. Raises ValueError on a bad value.
    """
    if requested is not None:
        if requested < 1:
            raise ValueError(f"--workers must be >= 1, got {requested}")
        if cuda_devices and requested > cuda_devices:
            raise ValueError(f"--workers {requested}, but only {cuda_devices} CUDA devices")
        return requested
    allocated = _env_int(environ, ENV_WORKERS, minimum=1)
    if cuda_devices:
        if allocated is not None and allocated != cuda_devices:
            log.warning(
                "%s=%d but %d CUDA devices are visible: running one worker per device",
                ENV_WORKERS,
                allocated,
                cuda_devices,
            )
        return cuda_devices
    return allocated or 1


@dataclass(frozen=True)
class PodWorld:
    """This pod's ``workers`` in the job's world of ``world_size`` workers, which may span
    several pods: worker ``i`` of the pod is global rank ``rank_offset + i``. The workers
    meet at ``master_addr:master_port``, the TCPStore that global rank 0 serves (env://);
    ``master_port`` None means a free port of this host (a world in one pod only)."""

    workers: int
    world_size: int
    rank_offset: int = 0
    master_addr: str = LOCALHOST
    master_port: int | None = None

    def __post_init__(self) -> None:
        if self.workers < 1 or self.rank_offset < 0:
            raise ValueError(f"need workers >= 1 and rank offset >= 0: {self}")
        if self.rank_offset + self.workers > self.world_size:
            raise ValueError(
                f"{ENV_RANK_OFFSET}={self.rank_offset} + {self.workers} workers in this pod > "
                f"{ENV_WORLD_SIZE}={self.world_size}: ranks would fall outside the world"
            )

    @classmethod
    def from_env(cls, workers: int, environ: Mapping[str, str]) -> PodWorld:
        """This pod's place from the operator's variables (``docs/distributed.md``); absent
        ones mean a world of this pod alone. Raises ValueError on a bad or inconsistent
        value."""
        world_size = _env_int(environ, ENV_WORLD_SIZE, minimum=1) or workers
        rank_offset = _env_int(environ, ENV_RANK_OFFSET, minimum=0) or 0
        master_addr = environ.get(ENV_MASTER_ADDR, "").strip()
        if not master_addr and rank_offset > 0:
            raise ValueError(
                f"{ENV_RANK_OFFSET}={rank_offset} but no {ENV_MASTER_ADDR}: a pod without "
                "rank 0 needs the address of the pod that holds it"
            )
        master_port = _env_int(environ, ENV_MASTER_PORT, minimum=1, maximum=MAX_PORT)
        if master_port is None and world_size > workers:  # other pods must know the port
            master_port = DEFAULT_MASTER_PORT
        return cls(workers, world_size, rank_offset, master_addr or LOCALHOST, master_port)

    def rank_env(self, local_rank: int) -> dict[str, str]:
        """The torchrun variables of the pod's worker ``local_rank``."""
        return {
            "RANK": str(self.rank_offset + local_rank),
            "LOCAL_RANK": str(local_rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_WORLD_SIZE": str(self.workers),
        }


# --- batch policy ------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchPolicy:
    """How the batch follows the worker count ``world_size`` (docs/distributed.md).

    ``batch_size`` is the configured batch: the global batch under ``fixed-global``, the
    per-worker batch under ``scale-with-workers``. ``micro_batch`` caps the samples one worker
    puts through the model at once (None = no cap); above it the worker accumulates gradients.
    """

    policy: str
    batch_size: int
    world_size: int
    micro_batch: int | None = None
    lr_warmup_steps: int = DEFAULT_LR_WARMUP_STEPS

    def __post_init__(self) -> None:
        if self.policy not in BATCH_POLICIES:
            raise ValueError(
                f"unknown batch policy {self.policy!r}; choose one of {BATCH_POLICIES}"
            )
        if self.batch_size < 1 or self.world_size < 1:
            raise ValueError("batch_size and world_size must be >= 1")
        if self.micro_batch is not None and self.micro_batch < 1:
            raise ValueError(f"micro_batch must be >= 1, got {self.micro_batch}")
        if self.lr_warmup_steps < 0:
            raise ValueError(f"lr_warmup_steps must be >= 0, got {self.lr_warmup_steps}")
        # Every rank must take part in every accumulation round (DDP syncs on the last one).
        rounds = self.accumulation_rounds
        if self.global_batch < rounds * self.world_size:
            raise ValueError(
                f"a global batch of {self.global_batch} cannot give each of {self.world_size} "
                f"workers a sample in each of {rounds} accumulation rounds; use fewer workers, "
                "a larger batch or a larger micro-batch"
            )

    @property
    def global_batch(self) -> int:
        """Samples per global step (all workers together)."""
        if self.policy == POLICY_SCALE_WITH_WORKERS:
            return self.batch_size * self.world_size
        return self.batch_size

    @property
    def accumulation_rounds(self) -> int:
        """Forward/backward passes per worker per step (1 without a micro-batch cap)."""
        per_worker = math.ceil(self.global_batch / self.world_size)
        if self.micro_batch is None:
            return 1
        return math.ceil(per_worker / self.micro_batch)

    @property
    def lr_scale(self) -> float:
        """Target learning-rate factor relative to the workload's base rate.

        ``fixed-global``: 1 (the global batch, hence the gradient's scale, does not change).
        ``scale-with-workers``: M, the linear scaling rule (Goyal et al. 2017: multiply the
        learning rate by k when the batch grows k-fold), the global batch being M x the
        configured one.
        """
        if self.policy == POLICY_SCALE_WITH_WORKERS:
            return float(self.world_size)
        return 1.0

    def lr_scale_at(self, step: int, start_step: int, start_scale: float) -> float:
        """The learning-rate factor of global step ``step`` of a run that began at
        ``start_step`` with factor ``start_scale`` (1 at the job's start, the checkpoint's
        factor after a resume): a linear ramp to :attr:`lr_scale` over ``lr_warmup_steps``
        steps (gradual warm-up), then constant."""
        target = self.lr_scale
        if self.lr_warmup_steps == 0 or step - start_step + 1 >= self.lr_warmup_steps:
            return target
        fraction = (step - start_step + 1) / self.lr_warmup_steps
        return start_scale + (target - start_scale) * fraction


# --- data order and sharding -------------------------------------------------------------

_ORDER_SALT = 0x5DEECE66D
"""Mixed into the seed of the data order so that it differs from the samples' own seeds."""


@dataclass
class DataOrder:
    """The order of sample indices in ``0..dataset_size-1``: pass ``p`` over the data is a
    permutation drawn from a generator seeded by ``(seed, p)``; the stream of positions
    concatenates the passes. Pure in ``(seed, dataset_size)``: this pair and the count of
    samples consumed are the whole state of the data order a checkpoint must keep."""

    seed: int
    dataset_size: int

    def __post_init__(self) -> None:
        if self.dataset_size < 1:
            raise ValueError(f"dataset_size must be >= 1, got {self.dataset_size}")
        self._pass: int | None = None
        self._permutation: list[int] = []

    def _permutation_of(self, data_pass: int) -> list[int]:
        if data_pass != self._pass:
            generator = torch.Generator()
            generator.manual_seed((self.seed ^ _ORDER_SALT) * 1_000_003 + data_pass)
            self._permutation = torch.randperm(self.dataset_size, generator=generator).tolist()
            self._pass = data_pass
        return self._permutation

    def indices(self, start: int, count: int) -> list[int]:
        """Sample indices at stream positions ``start .. start+count-1`` (start, count >= 0)."""
        out: list[int] = []
        position = start
        while len(out) < count:
            data_pass, offset = divmod(position, self.dataset_size)
            take = min(count - len(out), self.dataset_size - offset)
            out.extend(self._permutation_of(data_pass)[offset : offset + take])
            position += take
        return out


def split_evenly(items: Sequence[int], parts: int) -> list[list[int]]:
    """``items`` cut into ``parts`` contiguous pieces whose sizes differ by at most one
    (the larger ones first)."""
    base, extra = divmod(len(items), parts)
    pieces, start = [], 0
    for part in range(parts):
        size = base + (1 if part < extra else 0)
        pieces.append(list(items[start : start + size]))
        start += size
    return pieces


@dataclass(frozen=True)
class Shard:
    """One forward/backward pass of a worker: its ``indices`` and ``loss_weight``, the factor
    on the pass's mean loss so that DDP's average over workers of the summed gradients is the
    gradient of the mean loss over the global batch: ``len(indices) * world_size / global``."""

    indices: list[int]
    loss_weight: float


def shard_indices(global_indices: Sequence[int], policy: BatchPolicy, rank: int) -> list[Shard]:
    """Rank ``rank``'s passes over one global step's ``global_indices``.

    The global batch is cut into :attr:`BatchPolicy.accumulation_rounds` rounds of nearly
    equal size, each round across the workers by :func:`split_evenly`; concatenating every
    rank's shards round by round, rank by rank, gives back ``global_indices`` (tested). Every
    rank gets the same number of non-empty passes, as DDP requires.
    """
    world = policy.world_size
    shards = []
    for round_indices in split_evenly(global_indices, policy.accumulation_rounds):
        mine = split_evenly(round_indices, world)[rank]
        shards.append(Shard(mine, len(mine) * world / len(global_indices)))
    return shards


# --- process group -------------------------------------------------------------------------


def init_process_group(world: WorldInfo, device: torch.device) -> None:
    """Join the workers' process group (env:// rendezvous: ``MASTER_ADDR``/``MASTER_PORT``):
    NCCL for CUDA devices, gloo otherwise. A world of one needs no group."""
    if world.world_size == 1:
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    # PyTorch >= 2.4 asks for the libuv TCPStore by default, and Debian's build has none
    # ("use_libuv was requested but PyTorch was build without libuv support"): the classic
    # store serves worlds of a few workers. USE_LIBUV=1 in the environment still picks libuv.
    os.environ.setdefault("USE_LIBUV", "0")
    dist.init_process_group(
        backend,
        init_method="env://",
        rank=world.rank,
        world_size=world.world_size,
        timeout=timedelta(seconds=PROCESS_GROUP_TIMEOUT_S),
    )
    log.info("rank %d/%d joined the %s process group", world.rank, world.world_size, backend)


def close_process_group(status: int | None = None) -> None:
    """Leave the process group, if one was joined.

    ``status``: this worker's run has ended normally with it, as every worker's does. Then
    first wait for the others (a worker that tore its group down after rank 0, which holds the
    rendezvous store, had exited hung there on PyTorch 2.6 with gloo: after a SIGTERM and its
    checkpoint, 3 of 4 runs of a two-worker trainer never exited; with the barrier, none of
    14), and tell :func:`launch_workers` the outcome before the teardown: every worker's work
    is done by then, so a worker whose teardown still hangs (once in a CI run on PyTorch 2.6:
    rank 0 logged its last step and its pod never exited) is killed with it after
    :data:`TEARDOWN_GRACE_S`. None: the others may be gone, no waiting for them.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    if status is not None:
        dist.barrier()
        if _outcome is not None:
            _outcome.value = status
    dist.destroy_process_group()


def reduce_step(loss_sum: float, stop: bool, device: torch.device) -> tuple[float, bool]:
    """One collective per step: the global batch's summed loss, and whether any worker was
    asked to stop (all workers then stop after the same step). Local without a group."""
    if not (dist.is_available() and dist.is_initialized()):
        return loss_sum, stop
    values = torch.tensor([loss_sum, 1.0 if stop else 0.0], dtype=torch.float64, device=device)
    dist.all_reduce(values)
    return float(values[0]), bool(values[1] > 0)


def gather_from_all(values: Sequence[int], device: torch.device) -> list[tuple[int, ...]]:
    """Every rank's ``values`` (integers, as many on each rank), in rank order; only this
    rank's without a group."""
    if not (dist.is_available() and dist.is_initialized()):
        return [tuple(values)]
    mine = torch.tensor(list(values), dtype=torch.int64, device=device)
    gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    return [tuple(int(v) for v in t.tolist()) for t in gathered]


# --- launching this pod's workers ----------------------------------------------------------


def free_port(address: str = LOCALHOST) -> int:
    """A TCP port that was free on ``address`` a moment ago (for the rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


_outcome: Synchronized[int] | None = None
"""In a worker started by :func:`launch_workers`: where it leaves its outcome for the launcher."""


def _worker_main(
    entry: Callable[[], int], pod: PodWorld, local_rank: int, outcome: Synchronized[int]
) -> None:
    global _outcome
    _outcome = outcome
    os.environ.update(pod.rank_env(local_rank))
    raise SystemExit(entry())


_FORWARDED = (signal.SIGTERM, signal.SIGINT)


def unblock_stop_signals() -> None:
    """Let SIGTERM/SIGINT through again; a worker calls it once its handler is installed
    (:func:`launch_workers` starts workers with them blocked, so none is lost or fatal)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)


def launch_workers(
    entry: Callable[[], int], pod: PodWorld, teardown_grace_s: float = TEARDOWN_GRACE_S
) -> int:
    """Run ``entry`` in ``pod.workers`` fresh processes (global ranks ``pod.rank_offset`` on,
    local ranks from 0) and wait.

    ``entry`` must be picklable (a module-level function or a ``functools.partial`` of one);
    it runs with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
    ``MASTER_ADDR`` and ``MASTER_PORT`` set, like under ``torchrun`` (the port: the pod's, or
    a free one), and must call :func:`unblock_stop_signals` once it handles SIGTERM. SIGTERM
    and SIGINT to this process are forwarded to every worker. Returns 0 if every worker
    exited 0, else the first non-zero exit status (1 for a worker killed by a signal); the
    others then get SIGTERM, and SIGKILL after :data:`STOP_GRACE_S`. Workers that have all
    ended their run (:func:`close_process_group` with a status) and have not exited
    ``teardown_grace_s`` later are killed, and their run's status counts as their exit's.
    """
    os.environ[ENV_MASTER_ADDR] = pod.master_addr
    os.environ[ENV_MASTER_PORT] = str(pod.master_port or free_port())
    context = multiprocessing.get_context("spawn")
    # Blocked before the start: workers inherit the mask, so a SIGTERM that arrives while
    # they import torch waits for their handler instead of killing them without a checkpoint.
    signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
    workers = []
    for local_rank in range(pod.workers):
        outcome = context.Value("i", NO_OUTCOME)
        spawned = context.Process(
            target=_worker_main,
            args=(entry, pod, local_rank, outcome),
            name=f"worker-{pod.rank_offset + local_rank}",
        )
        workers.append(_Worker(spawned, outcome))
    processes = [w.process for w in workers]

    forward = _forwarder(processes)
    previous = {signum: signal.signal(signum, forward) for signum in _FORWARDED}
    try:
        for process in processes:
            process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
    log.info(
        "started %d workers, ranks %d..%d of %d (pids %s)",
        pod.workers,
        pod.rank_offset,
        pod.rank_offset + pod.workers - 1,
        pod.world_size,
        [p.pid for p in processes],
    )
    try:
        return _wait_for_workers(workers, teardown_grace_s)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _stop_all([p for p in processes if p.exitcode is None])


@dataclass(frozen=True)
class _Worker:
    process: multiprocessing.process.BaseProcess
    outcome: Synchronized[int]  # its run's status once ended with the others', else NO_OUTCOME


def _forwarder(
    processes: Sequence[multiprocessing.process.BaseProcess],
) -> Callable[[int, FrameType | None], None]:
    """A signal handler that sends the signal it gets on to every worker still running."""

    def forward(signum: int, frame: FrameType | None) -> None:
        for process in processes:
            if process.pid is not None and process.exitcode is None:
                with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                    os.kill(process.pid, signum)

    return forward


def _wait_for_workers(workers: Sequence[_Worker], teardown_grace_s: float) -> int:
    """Wait until every worker has exited: 0 if all exited 0, else the first non-zero exit
    status (1 for a worker killed by a signal), and the others are then stopped. Workers that
    have all ended their run and are still there ``teardown_grace_s`` later are killed."""
    status = 0
    pending = list(workers)
    ended_since: float | None = None  # when every pending worker had ended its run
    while pending:
        ready = multiprocessing.connection.wait(
            [w.process.sentinel for w in pending], timeout=min(1.0, teardown_grace_s)
        )
        exits = []
        for worker in [w for w in pending if w.process.sentinel in ready]:
            worker.process.join()
            pending.remove(worker)
            code = worker.process.exitcode or 0
            exits.append((worker.process.name, code if code >= 0 else 1))
        if pending and all(w.outcome.value != NO_OUTCOME for w in pending):
            ended_since = ended_since if ended_since is not None else time.monotonic()
            if time.monotonic() - ended_since >= teardown_grace_s:
                exits += _kill_hung_teardowns(pending, teardown_grace_s)
                pending = []
        for name, code in exits:
            if code != 0 and status == 0:
                status = code
                log.error("%s exited with %s: stopping the others", name, code)
                _stop_all([w.process for w in pending])
    return status


def _kill_hung_teardowns(workers: Sequence[_Worker], grace_s: float) -> list[tuple[str, int]]:
    """Kill workers whose run has ended but whose teardown of the process group hangs; their
    runs' statuses, by name."""
    exits = []
    for worker in workers:
        log.warning(
            "%s ended its run (status %d) but had not exited %.0f s later (tearing the process "
            "group down hung): killed",
            worker.process.name,
            worker.outcome.value,
            grace_s,
        )
        worker.process.kill()
        worker.process.join()
        exits.append((worker.process.name, worker.outcome.value))
    return exits


def _stop_all(processes: Sequence[multiprocessing.process.BaseProcess]) -> None:
    for process in processes:
        if process.exitcode is None and process.pid is not None:
            try:
                os.kill(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for process in processes:
        process.join(STOP_GRACE_S)
        if process.exitcode is None:
            process.kill()
            process.join()
