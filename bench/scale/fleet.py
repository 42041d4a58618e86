"""The SIMULATED trainer fleet's pure parts: speed curves, simulated trainers, the simulated
kubelet's resize verdicts, and the status patches and /metrics text the simulator writes.

Nothing here does I/O; :mod:`simulator` (the process) feeds it pods from a watch and sends
what it returns to the API server. Everything simulated says so: the trainers are models of
the reference workloads' measured speed (``docs/benchmarks/results.json`` profiles), and the
"kubelet" is the part of one that answers in-place resizes for pods on kwok's fake nodes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from decor.core import build
from decor.core.control import thread_cores
from decor_trainer import contract

GPU_RESOURCE = build.GPU_RESOURCE
CPU_SCALING_EXPONENT_BOUNDS = (0.0, 1.0)
"""Bounds of the fitted exponent that extrapolates a CPU curve past its last measured core.
A curve whose last two whole cores slow down (the LSTM profile: two cores slower than one on
the 2-core machine that profiled it) goes on flat, no faster than its last core: with a
floor above zero it fell and then rose again (the LSTM 8 % faster at four cores than at
one), a shape no thread count gives, and a law that measured one and two cores cannot
foresee."""
SIM_GPU_STEPS_PER_S = 8.0
"""Simulated steps per second of one GPU (ASSUMED: no GPU profile is measured here)."""
SIM_GPU_SCALING_EXPONENT = 0.9
"""Simulated GPU speed-up: rate(g) = rate(1) * g ** exponent (ASSUMED, data-parallel-like)."""
DEFAULT_NOISE = 0.05
"""Relative standard deviation of a simulated trainer's speed per tick."""
NOISE_FLOOR = 0.2
"""A noisy tick never runs slower than this fraction of the mean speed."""
RESIZE_PENDING = "PodResizePending"
RESIZE_IN_PROGRESS = "PodResizeInProgress"
REASON_DEFERRED = "Deferred"
REASON_INFEASIBLE = "Infeasible"
VERDICT_APPLY = "Apply"


# ---------------------------------------------------------------------------------------------
# Speed curves


@dataclass(frozen=True)
class SpeedCurve:
    """Steps per second of a simulated trainer at an allocation.

    CPU (``mode == "cpu"``): measured ``points`` (cores, steps/s) of a reference workload. The
    reference trainer runs one thread per whole core (:func:`decor.core.control.thread_cores`), so
    below one core speed is proportional to the quota, and from one core up it follows the
    measured whole-core points (interpolated), extrapolated past the last one as
    ``rate(n) * (k / n) ** exponent`` with the exponent fitted on the last two whole-core points.
    GPU: ``rate(1) * g ** SIM_GPU_SCALING_EXPONENT`` (assumed).
    """

    workload: str
    mode: str
    points: tuple[tuple[float, float], ...]

    def steps_per_s(self, allocation: float) -> float:
        """Mean steps per second at ``allocation`` (cores or GPUs, > 0); 0 for nothing."""
        if allocation <= 0:
            return 0.0
        if self.mode == "gpu":
            rate_one = self.points[0][1] if self.points else SIM_GPU_STEPS_PER_S
            return rate_one * allocation**SIM_GPU_SCALING_EXPONENT
        whole = sorted((c, r) for c, r in self.points if c >= 1.0 and abs(c - round(c)) < 1e-6)
        if not whole:
            raise ValueError(f"{self.workload}: the curve has no whole-core point")
        one_core_rate = whole[0][1] / whole[0][0]
        cores = thread_cores(allocation)
        if cores < 1.0:
            return one_core_rate * cores
        if cores <= whole[0][0]:
            return whole[0][1] * cores / whole[0][0]
        for (c0, r0), (c1, r1) in zip(whole, whole[1:], strict=False):
            if c0 <= cores <= c1:
                return r0 + (r1 - r0) * (cores - c0) / (c1 - c0)
        last_c, last_r = whole[-1]
        return last_r * (cores / last_c) ** self.scaling_exponent()

    def scaling_exponent(self) -> float:
        """The exponent that extrapolates the CPU curve past its last whole-core point."""
        whole = sorted((c, r) for c, r in self.points if c >= 1.0 and abs(c - round(c)) < 1e-6)
        low, high = CPU_SCALING_EXPONENT_BOUNDS
        if len(whole) < 2:
            return high
        (c0, r0), (c1, r1) = whole[-2], whole[-1]
        if r0 <= 0 or r1 <= 0:
            return high
        return min(high, max(low, math.log(r1 / r0) / math.log(c1 / c0)))


def curves_from_profiles(profiles: Mapping[str, Any]) -> dict[str, SpeedCurve]:
    """CPU speed curves from the benchmark's measured ``profiles`` (the ``profiles`` object of
    docs/benchmarks/results.json), by workload name; plus a simulated ``gpu`` curve."""
    curves: dict[str, SpeedCurve] = {}
    for name, profile in profiles.items():
        points = tuple(
            (float(p["cores"]), float(p["steps_per_s"])) for p in profile.get("curve") or []
        )
        if points:
            curves[name] = SpeedCurve(workload=name, mode="cpu", points=points)
    curves["gpu"] = SpeedCurve(workload="gpu", mode="gpu", points=((1.0, SIM_GPU_STEPS_PER_S),))
    return curves


# ---------------------------------------------------------------------------------------------
# Simulated trainers


@dataclass
class SimTrainer:
    """One simulated trainer process (one pod): its progress in steps, in Unix seconds."""

    namespace: str
    pod: str
    steps_planned: int
    steps_per_epoch: int
    steps_done: float
    ready_s: float  # when it finished starting (imports, checkpoint load) and trains
    last_tick_s: float
    last_step_time_s: float = 0.0
    step_s: float = 0.0
    finished_s: float | None = None
    rng: random.Random = field(default_factory=random.Random)
    instance: str = ""
    """The pod's address, exported as the series' ``instance`` (the scale bed's Prometheus
    scrapes one endpoint for all pods with honor_labels; the operator counts a series for a
    pod only when its instance is that pod's address)."""

    @property
    def reporting(self) -> bool:
        """It serves metrics once it has started training (the reporter starts with it)."""
        return self.last_tick_s >= self.ready_s

    def advance(self, now_s: float, steps_per_s: float, noise: float = DEFAULT_NOISE) -> None:
        """Train from the last tick to ``now_s`` at ``steps_per_s`` (times noise)."""
        if self.finished_s is not None or now_s <= self.last_tick_s:
            return
        start_s = max(self.last_tick_s, self.ready_s)
        self.last_tick_s = now_s
        if now_s <= start_s or steps_per_s <= 0:
            return
        rate = steps_per_s * max(NOISE_FLOOR, self.rng.gauss(1.0, noise) if noise else 1.0)
        before = self.steps_done
        after = before + (now_s - start_s) * rate
        if after >= self.steps_planned:
            self.finished_s = now_s - (after - self.steps_planned) / rate
            after = float(self.steps_planned)
            self.last_step_time_s = self.finished_s
        elif math.floor(after) > math.floor(before):
            self.last_step_time_s = now_s - (after - math.floor(after)) / rate
        self.steps_done = after
        self.step_s = 1.0 / rate

    @property
    def whole_steps(self) -> int:
        return int(math.floor(self.steps_done + 1e-9))

    @property
    def epochs_done(self) -> int:
        return self.whole_steps // self.steps_per_epoch if self.steps_per_epoch > 0 else 0


def exposition(trainers: Iterable[SimTrainer]) -> str:
    """The reporter's metric set (same names as ``decor_trainer.exposition``) for every
    reporting trainer, each series with ``namespace`` and ``pod`` labels."""
    rows: dict[str, list[str]] = {name: [] for name, _, _ in METRICS}
    for t in trainers:
        if not t.reporting:
            continue
        labels = f'{{namespace="{t.namespace}",pod="{t.pod}",instance="{t.instance}"}}'
        epochs_planned = t.steps_planned // t.steps_per_epoch if t.steps_per_epoch else 0
        values = {
            "decor_steps_completed_total": t.whole_steps,
            "decor_steps_planned": t.steps_planned,
            "decor_epochs_completed": t.epochs_done,
            "decor_epochs_planned": epochs_planned,
            "decor_step_duration_seconds": t.step_s,
            "decor_last_step_timestamp_seconds": t.last_step_time_s,
        }
        for name, value in values.items():
            rows[name].append(f"{name}{labels} {value:.6f}".rstrip("0").rstrip("."))
    lines: list[str] = []
    for name, kind, help_text in METRICS:
        lines.append(f"# HELP {name} {help_text} (SIMULATED trainer fleet)")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(rows[name])
    return "\n".join(lines) + "\n"


METRICS = (
    ("decor_steps_completed_total", "counter", "Mini-batches completed since the job started."),
    ("decor_steps_planned", "gauge", "Mini-batches the whole job will run."),
    ("decor_epochs_completed", "gauge", "Whole epochs completed."),
    ("decor_epochs_planned", "gauge", "Epochs the job will run."),
    ("decor_step_duration_seconds", "gauge", "Wall time of the most recent mini-batch."),
    (
        "decor_last_step_timestamp_seconds",
        "gauge",
        "Unix time at which the most recent mini-batch completed.",
    ),
)


# ---------------------------------------------------------------------------------------------
# Reading pods


def trainer_container(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The trainer: the pod's first container (what the operator builds)."""
    return ((pod.get("spec") or {}).get("containers") or [{}])[0]


def container_env(container: Mapping[str, Any]) -> dict[str, str]:
    return {str(e.get("name")): str(e.get("value", "")) for e in container.get("env") or []}


def planned_steps(pod: Mapping[str, Any]) -> tuple[int, int]:
    """(steps planned, steps per epoch) from the environment the operator gives the trainer."""
    env = container_env(trainer_container(pod))
    epochs = int(env.get(contract.ENV_EPOCHS) or 0)
    per_epoch = int(env.get(contract.ENV_STEPS_PER_EPOCH) or 0)
    return epochs * per_epoch, per_epoch


def workload_of(pod: Mapping[str, Any]) -> str:
    """The reference workload the trainer's ``--workload`` argument names ('' if none)."""
    args = [str(a) for a in trainer_container(pod).get("args") or []]
    for i, arg in enumerate(args):
        if arg == "--workload" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--workload="):
            return arg.split("=", 1)[1]
    return ""


def parse_cpu_cores(value: Any) -> float:
    """A Kubernetes CPU quantity (``500m``, ``2``) in cores, read as the operator reads one
    (:func:`decor.core.build.parse_allocation`); 0 for none."""
    return build.parse_allocation("cpu", value) or 0.0


def parse_count(value: Any) -> float:
    return float(value) if value not in (None, "") else 0.0


def _requests(container: Mapping[str, Any]) -> Mapping[str, Any]:
    resources = container.get("resources") or {}
    return resources.get("requests") or resources.get("limits") or {}


def desired_cpu_cores(pod: Mapping[str, Any]) -> float:
    """The trainer's CPU request in the pod's spec (what a resize asks for)."""
    return parse_cpu_cores(_requests(trainer_container(pod)).get("cpu"))


def applied_resources(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``status.containerStatuses[trainer].resources`` as the (simulated) kubelet wrote it."""
    name = trainer_container(pod).get("name")
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == name:
            return status.get("resources")
    return None


def applied_cpu_cores(pod: Mapping[str, Any]) -> float | None:
    resources = applied_resources(pod)
    if not resources:
        return None
    return parse_cpu_cores((resources.get("requests") or {}).get("cpu"))


def gpus_of(pod: Mapping[str, Any]) -> float:
    return parse_count(_requests(trainer_container(pod)).get(GPU_RESOURCE))


def pod_charge(pod: Mapping[str, Any]) -> tuple[float, float]:
    """(cores, GPUs) the node has admitted for the pod, as a kubelet counts: every container's
    and restartable init container's requests, the trainer at what is applied (a resize not
    yet applied holds nothing new)."""
    spec = pod.get("spec") or {}
    cores = gpus = 0.0
    trainer = trainer_container(pod)
    applied = applied_cpu_cores(pod)
    for container in spec.get("containers") or []:
        requests = _requests(container)
        if container is trainer and applied is not None:
            cores += applied
        else:
            cores += parse_cpu_cores(requests.get("cpu"))
        gpus += parse_count(requests.get(GPU_RESOURCE))
    for container in spec.get("initContainers") or []:
        if container.get("restartPolicy") == "Always":
            cores += parse_cpu_cores(_requests(container).get("cpu"))
    return cores, gpus


def resize_verdict(
    desired_cores: float, applied_cores: float, node_cores: float, others_cores: float
) -> str:
    """What the simulated kubelet answers to a CPU resize from ``applied_cores`` to
    ``desired_cores`` on a node of ``node_cores`` allocatable where every other container
    (other pods, this pod's other containers) holds ``others_cores``: Apply, Deferred (it may
    fit later) or Infeasible (it can never fit on this node)."""
    if desired_cores <= applied_cores + 1e-9:
        return VERDICT_APPLY  # a shrink always fits
    if desired_cores > node_cores + 1e-9:
        return REASON_INFEASIBLE
    if others_cores + desired_cores > node_cores + 1e-9:
        return REASON_DEFERRED
    return VERDICT_APPLY


# ---------------------------------------------------------------------------------------------
# Status patches (merge patches of pods/status: whole lists, computed from the watched pod)


def _without_resize_conditions(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        dict(c)
        for c in (pod.get("status") or {}).get("conditions") or []
        if c.get("type") not in (RESIZE_PENDING, RESIZE_IN_PROGRESS)
    ]


def _container_statuses(pod: Mapping[str, Any], change: Mapping[str, Any]) -> list[dict[str, Any]]:
    name = trainer_container(pod).get("name")
    statuses = [dict(s) for s in (pod.get("status") or {}).get("containerStatuses") or []]
    for status in statuses:
        if status.get("name") == name:
            status.update(change)
    return statuses


def applied_patch(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The simulated kubelet has applied the trainer's resources as the spec asks: report
    them (``resources``, ``allocatedResources``) and clear the resize conditions."""
    resources = trainer_container(pod).get("resources") or {}
    requests = dict(resources.get("requests") or {})
    change = {
        "resources": {k: dict(v) for k, v in resources.items() if k in ("requests", "limits")},
        "allocatedResources": requests,
    }
    return {
        "status": {
            "containerStatuses": _container_statuses(pod, change),
            "conditions": _without_resize_conditions(pod),
        }
    }


def pending_patch(pod: Mapping[str, Any], reason: str, message: str, now_rfc3339: str) -> dict:
    """The resize waits: ``PodResizePending`` with ``reason`` (Deferred or Infeasible)."""
    conditions = _without_resize_conditions(pod)
    conditions.append(
        {
            "type": RESIZE_PENDING,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastProbeTime": now_rfc3339,
            "lastTransitionTime": now_rfc3339,
        }
    )
    return {"status": {"conditions": conditions}}


def completed_patch(
    pod: Mapping[str, Any], finished_rfc3339: str, steps_done: int, steps_planned: int
) -> dict[str, Any]:
    """The trainer exited 0 after its last step: the pod Succeeded, with the termination
    message ``steps=DONE/PLANNED`` that decor_trainer leaves (the kubelet reports it)."""
    name = trainer_container(pod).get("name")
    statuses = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        status = dict(status)
        if status.get("name") == name:
            started = ((status.get("state") or {}).get("running") or {}).get("startedAt")
            status["state"] = {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "message": f"steps={steps_done}/{steps_planned}",
                    "startedAt": started or finished_rfc3339,
                    "finishedAt": finished_rfc3339,
                }
            }
            status["ready"] = False
            status["started"] = False
        statuses.append(status)
    conditions = [
        {**c, "status": "False"} if c.get("type") in ("Ready", "ContainersReady") else dict(c)
        for c in _without_resize_conditions(pod)
    ]
    return {
        "status": {"phase": "Succeeded", "containerStatuses": statuses, "conditions": conditions}
    }


def resize_condition(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) of a True PodResizePending condition, else None."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == RESIZE_PENDING and c.get("status") == "True":
            return str(c.get("reason") or ""), str(c.get("message") or "")
    return None


def node_capacity(node: Mapping[str, Any]) -> tuple[float, float]:
    """(cores, GPUs) a node's status says are allocatable."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return parse_cpu_cores(allocatable.get("cpu")), parse_count(allocatable.get(GPU_RESOURCE))


def held_by_node(pods: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Cores every node has admitted for the pods on it (:func:`pod_charge`), finished pods
    aside."""
    held: dict[str, float] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        held[node] = held.get(node, 0.0) + pod_charge(pod)[0]
    return held


def others_on_node(
    pods: Sequence[Mapping[str, Any]], node: str, exclude: tuple[str, str]
) -> tuple[float, float]:
    """(cores, GPUs) every pod on ``node`` but ``exclude`` (namespace, name) holds."""
    cores = gpus = 0.0
    for pod in pods:
        meta = pod.get("metadata") or {}
        if (meta.get("namespace"), meta.get("name")) == exclude:
            continue
        if (pod.get("spec") or {}).get("nodeName") != node:
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        c, g = pod_charge(pod)
        cores += c
        gpus += g
    return cores, gpus
