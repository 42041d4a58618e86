"""A namespace's ResourceQuota as the planner sees it: what is left, and what a grant charges.

Pure, stdlib only. The view layer (``views.quotas_left``) reads each ResourceQuota's
``status.hard`` and ``status.used``, gives back what DECOR's planned trainer pods charge now
(the planner hands that out again), and passes a :class:`Quota` per ResourceQuota; the
planner (``planner.plan``) never grants more than every quota of a job's namespace leaves.

Resources are Kubernetes' quota names in their canonical spelling (``cpu`` is
``requests.cpu``, ``pods`` is ``count/pods``); amounts are in base units: cores, bytes,
GPUs, pods. Only the resources a trainer pod charges are read; any other resource of a
quota changes nothing here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

REQUESTS_CPU = "requests.cpu"
LIMITS_CPU = "limits.cpu"
REQUESTS_MEMORY = "requests.memory"
LIMITS_MEMORY = "limits.memory"
REQUESTS_GPU = "requests.nvidia.com/gpu"
PODS = "count/pods"

CHARGED = (REQUESTS_CPU, LIMITS_CPU, REQUESTS_MEMORY, LIMITS_MEMORY, REQUESTS_GPU, PODS)
"""The resources a trainer pod charges, each once."""

ALIASES = {
    "cpu": REQUESTS_CPU,
    "memory": REQUESTS_MEMORY,
    "pods": PODS,
    "nvidia.com/gpu": REQUESTS_GPU,
    **{name: name for name in CHARGED},
}
"""A quota's resource name -> the one it means among :data:`CHARGED` (others: not read)."""

ALLOCATION_CHARGES = {"cpu": (REQUESTS_CPU, LIMITS_CPU), "gpu": (REQUESTS_GPU,)}
"""Where a job's allocation is charged, by mode: a CPU trainer's requests = limits are its
cores; a GPU trainer's ``nvidia.com/gpu`` its GPUs."""

Amounts = tuple[tuple[str, float], ...]
"""(resource, amount) pairs, resources from :data:`CHARGED`: a frozen mapping."""


@dataclass(frozen=True)
class Quota:
    """One ResourceQuota: what it leaves for the trainer pods the planner plans (their own
    charge given back), per resource of :data:`CHARGED` that it limits."""

    namespace: str
    name: str
    left: Amounts

    @property
    def title(self) -> str:
        """How a reason names it: ``ResourceQuota namespace/name``."""
        return f"ResourceQuota {self.namespace}/{self.name}"


def canonical(resource: str) -> str | None:
    """The :data:`CHARGED` name a quota's resource means; None for one a trainer does not
    charge (``services``, ``requests.storage``, ...)."""
    return ALIASES.get(resource)


def charge(
    per_pod: Mapping[str, float], mode: str, allocation: float, pods: int
) -> dict[str, float]:
    """What ``pods`` trainer pods holding ``allocation`` cores or GPUs together charge:
    ``per_pod`` (what each pod charges beside the allocation: sidecars, memory) times the
    pods, the allocation on :data:`ALLOCATION_CHARGES`, and one ``count/pods`` per pod. No
    pod, no charge."""
    if pods <= 0:
        return {}
    out = {resource: amount * pods for resource, amount in per_pod.items() if resource != PODS}
    for resource in ALLOCATION_CHARGES.get(mode, ()):
        out[resource] = out.get(resource, 0.0) + allocation
    out[PODS] = float(pods)
    return out


def pod_charge_beside(usage: Mapping[str, float], mode: str, allocation: float) -> Amounts:
    """What a trainer pod charges beside its allocation, from what it charges in all
    (``usage``, e.g. ``views.pod_quota_usage`` of a pod built at ``allocation``): the
    allocation taken off the resources it is charged to, ``count/pods`` left out."""
    out = dict(usage)
    out.pop(PODS, None)
    for resource in ALLOCATION_CHARGES.get(mode, ()):
        out[resource] = max(0.0, out.get(resource, 0.0) - allocation)
    return tuple(sorted((r, a) for r, a in out.items() if a > 0))
