"""What a namespace's LimitRanges leave of a job's allocation bounds.

Pure, stdlib and the model's quantity parsing only. A LimitRange's ``Container`` and ``Pod``
items bound every pod the admission plugin sees, the trainer's pod on creation and on each
in-place resize included; a job whose ``spec.resources.min``/``max`` the law would otherwise
use beyond them meets a refused create or resize. :func:`clip` turns every LimitRange of the
job's namespace into bounds on the trainer's allocation (cores, or GPUs), intersected with
the job's own ``[min, max]``: the law and the planner then work within them. When nothing is
left (the job's range and the LimitRanges' do not meet), :func:`clip` says which bound of
which LimitRange stands in the way.

What is read, per item:

- ``type: Container``, ``min``/``max`` of ``cpu`` (CPU jobs) or ``nvidia.com/gpu`` (GPU
  jobs): the trainer container's requests = limits, which are the allocation.
- ``type: Pod``, the same: the pod's sum, that is the allocation plus what the pod holds
  beside the trainer (``beside``: DECOR's metrics sidecar and the template's other
  containers, ``build.job_overhead_cpu_cores``; GPUs are the trainer's alone).
- ``maxLimitRequestRatio``: DECOR sets the trainer's requests = limits, a ratio of 1, which
  every ratio the API server accepts (at least 1) allows: it bounds nothing here.
- ``default``/``defaultRequest``: the trainer's CPU or GPU is always set, so they change
  nothing for it.

GPU bounds are whole GPUs (a minimum rounds up, a maximum down). A GPU job spread over pods
(``gpusPerPod``) holds at most ``gpusPerPod`` GPUs a container: it is refused when that is
above a LimitRange's maximum, and its allocation is otherwise not clipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from decor.api.model import GPU_RESOURCE, quantity_value

CONTAINER = "Container"
POD = "Pod"
CPU = "cpu"
EPSILON = 1e-9
"""Slack when comparing cores (bounds are millicores; a float sum may miss by a hair)."""


@dataclass(frozen=True)
class Bound:
    """One end of the allowed range: its value (cores or GPUs of the allocation) and who
    sets it (``spec.resources.max``, or ``max cpu 500m (Container) of LimitRange ns/name``)."""

    value: float
    source: str
    limit_range: str | None = None  # ``namespace/name``; None for the job's own bound


@dataclass(frozen=True)
class Clip:
    """The allocation bounds the LimitRanges leave: ``low``..``high`` (cores or GPUs), and
    what changed from the job's own as sentences (empty when no LimitRange bounds it);
    ``refusal`` says why no allocation is allowed (then ``low``/``high`` are the job's)."""

    low: float
    high: float
    changes: tuple[str, ...] = ()
    refusal: str | None = None


def clip(
    limit_ranges: Iterable[Mapping[str, Any]],
    mode: str,
    low: float,
    high: float,
    *,
    beside_cores: float = 0.0,
    gpus_per_pod: int = 0,
) -> Clip:
    """The bounds of a job's allocation (``mode`` ``cpu``: cores; ``gpu``: GPUs) within
    ``[low, high]`` (its ``spec.resources.min``/``max``) that every LimitRange of
    ``limit_ranges`` (the bodies in the job's namespace) allows. ``beside_cores``: the cores
    a trainer pod holds beside its trainer (a ``Pod`` item's sum counts them)."""
    resource = CPU if mode == "cpu" else GPU_RESOURCE
    lows = [Bound(low, "spec.resources.min")]
    highs = [Bound(high, "spec.resources.max")]
    for body in limit_ranges:
        meta = body.get("metadata") or {}
        title = f"{meta.get('namespace')}/{meta.get('name')}"
        for item in (body.get("spec") or {}).get("limits") or []:
            kind = item.get("type")
            if kind not in (CONTAINER, POD):
                continue
            beside = beside_cores if kind == POD and mode == "cpu" else 0.0
            for end, out in (("min", lows), ("max", highs)):
                value = quantity_value((item.get(end) or {}).get(resource))
                if value is None:
                    continue
                source = f"{end} {resource} {_quantity(mode, value)} ({kind}) of LimitRange {title}"
                out.append(Bound(_allocation(mode, end, value - beside), source, title))
    if mode == "gpu" and gpus_per_pod > 0:
        return _per_pod(low, high, highs, gpus_per_pod)
    floor = max(lows, key=lambda b: b.value)
    ceiling = min(highs, key=lambda b: b.value)
    if floor.value > ceiling.value + EPSILON:
        refusal = (
            f"{floor.source} ({_quantity(mode, floor.value)} for the trainer) is above "
            f"{ceiling.source} ({_quantity(mode, ceiling.value)} for the trainer)"
        )
        return Clip(low, high, refusal=refusal)
    changes = []
    if floor.limit_range is not None and floor.value > low + EPSILON:
        changes.append(f"min {_quantity(mode, low)} raised to {_quantity(mode, floor.value)} "
                       f"by LimitRange {floor.limit_range}")  # fmt: skip
    if ceiling.limit_range is not None and ceiling.value < high - EPSILON:
        changes.append(f"max {_quantity(mode, high)} clipped to "
                       f"{_quantity(mode, ceiling.value)} by LimitRange {ceiling.limit_range}")  # fmt: skip
    return Clip(floor.value, ceiling.value, tuple(changes))


def _per_pod(low: float, high: float, highs: list[Bound], gpus_per_pod: int) -> Clip:
    """A GPU job spread over pods: each container holds up to ``gpus_per_pod`` GPUs."""
    for bound in highs:
        if bound.limit_range is not None and gpus_per_pod > bound.value + EPSILON:
            refusal = f"spec.resources.gpusPerPod {gpus_per_pod} is above {bound.source}"
            return Clip(low, high, refusal=refusal)
    return Clip(low, high)


def _allocation(mode: str, end: str, value: float) -> float:
    """A bound in the allocation's units: whole GPUs inward (a minimum up, a maximum down),
    cores as they are; never below zero."""
    if mode == "gpu":
        value = math.ceil(value - EPSILON) if end == "min" else math.floor(value + EPSILON)
    return max(0.0, float(value))


def _quantity(mode: str, value: float) -> str:
    """``1500m`` for cores, ``2`` for GPUs (as a reason names them)."""
    if mode == "gpu":
        return str(int(round(value)))
    return f"{int(round(value * 1000))}m"
