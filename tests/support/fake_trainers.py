"""Simulated trainers: the progress the control loop reads each period, without a trainer.

:class:`FakeTrainers` stands in for the trainers' ``/metrics`` endpoints (or Prometheus) at
the loop's own seam, ``ControlLoop(read_progress=...)``: it answers the period's batched read
with one :class:`decor.core.progress.Progress` per running trainer pod. Between periods
:meth:`FakeTrainers.advance` moves each job's steps at the speed its allocation in effect
gives (the CPU the kubelet reports as applied, or the pod's GPUs): a plausible plant for the
control law, and a deterministic one. A job's steps survive its pods (the trainer checkpoints
every step and a new pod resumes where the last one stopped).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from decor.core import build, progress
from decor.core.views import Key, Snapshot, job_label

from support.fake_kube import RecordingKube


def linear_speed(steps_per_s_per_unit: float) -> Callable[[float], float]:
    """Steps per second proportional to the allocation (cores or GPUs)."""
    return lambda allocation: steps_per_s_per_unit * allocation


@dataclass
class FakeTrainer:
    """One job's training: ``speed`` (steps/s at an allocation), where it is, and whether its
    pod exits once every step is done (``exits``) or keeps running and reporting."""

    steps_planned: float
    steps_per_epoch: float
    speed: Callable[[float], float]
    mode: str = "cpu"
    exits: bool = False
    steps_done: float = 0.0
    last_step_s: float | None = None
    paused: bool = False  # the trainer runs but takes no step (a hung data loader)
    unreadable: str | None = None  # why its progress cannot be read now (None: it can)


class FakeTrainers:
    """The trainers of every job in a :class:`RecordingKube`, by job name."""

    def __init__(self, kube: RecordingKube, clock: Callable[[], float]) -> None:
        self.kube = kube
        self.clock = clock
        self.jobs: dict[str, FakeTrainer] = {}
        self._last_s: float | None = None

    def add(self, job: str, trainer: FakeTrainer) -> FakeTrainer:
        self.jobs[job] = trainer
        return trainer

    def advance(self) -> None:
        """Train from the last call until now at the allocation in effect in each job's pod;
        a trainer that is done and ``exits`` ends its pod (exit 0, ``steps=DONE/PLANNED``)."""
        now = self.clock()
        dt = 0.0 if self._last_s is None else now - self._last_s
        self._last_s = now
        for (namespace, name), pod in sorted(self.kube.pods.items()):
            trainer = self.jobs.get(str(job_label(pod)))
            if trainer is None or not _training(pod):
                continue
            rate = 0.0 if trainer.paused else trainer.speed(_allocation(pod, trainer.mode))
            if rate > 0 and trainer.steps_done < trainer.steps_planned:
                before = trainer.steps_done
                trainer.steps_done = min(trainer.steps_planned, before + dt * rate)
                if math.floor(trainer.steps_done) > math.floor(before):
                    # When the last whole step completed (the reporter stamps each step).
                    whole = math.floor(trainer.steps_done)
                    trainer.last_step_s = now - dt + (whole - before) / rate
            if trainer.exits and trainer.steps_done >= trainer.steps_planned:
                message = f"steps={int(trainer.steps_done)}/{int(trainer.steps_planned)}"
                self.kube.finish_trainer(namespace, name, message, trainer.last_step_s or now)

    def read(
        self, snapshot: Snapshot, due: list[Key]
    ) -> Mapping[progress.PodKey, progress.ProgressRead]:
        """The period's progress read: every running trainer pod of the due jobs."""
        reads: dict[progress.PodKey, progress.ProgressRead] = {}
        for namespace, job in due:
            trainer = self.jobs.get(job)
            if trainer is None:
                continue
            uid = str(snapshot.jobs[(namespace, job)]["metadata"]["uid"])
            for pod in snapshot.job_pods(namespace, uid):
                if not _training(pod):
                    continue
                if trainer.unreadable is not None:
                    reads[(namespace, pod["metadata"]["name"])] = progress.MetricsError(
                        trainer.unreadable
                    )
                    continue
                reads[(namespace, pod["metadata"]["name"])] = progress.Progress(
                    steps_done=float(math.floor(trainer.steps_done)),
                    steps_planned=trainer.steps_planned,
                    last_step_time_s=trainer.last_step_s,
                    epochs_done=float(math.floor(trainer.steps_done // trainer.steps_per_epoch)),
                )
        return reads


def _training(pod: Mapping[str, object]) -> bool:
    return (
        build.pod_phase(pod) == "Running"
        and not build.is_terminating(pod)
        and build.container_running(pod, "trainer")
    )


def _allocation(pod: Mapping[str, object], mode: str) -> float:
    if mode == "gpu":
        return build.pod_gpu_count(pod, "trainer") or 0.0
    return build.applied_cpu_cores(pod, "trainer") or 0.0
