"""A namespace's ResourceQuota as the planner sees it: what is left, and what a grant charges.

Pure, stdlib only. The view layer (``views.quotas_left``) reads each ResourceQuota's
``status.hard`` and ``status.used``, gives back what DECOR's planned trainer pods charge now
(the planner hands that out again), and passes a :class:`Quota` per ResourceQuota; the
planner (``planner.plan``) never grants more than every quota of a job's namespace leaves.

Resources are Kubernetes' quota names in their canonical spelling (``cpu`` is
``requests.cpu``, ``pods`` is ``count/pods``); amounts are in base units: cores, bytes,
GPUs, pods. Only the resources a trainer pod charges are read; any other resource of a
quota changes nothing here.

A quota with ``scopes`` or a ``scopeSelector`` counts only the pods its scopes match
(:class:`Scope`, :func:`applies`): the planner bounds a job by the quotas that match its
trainer pods (:class:`PodFacts`, from the pod DECOR builds for it), as the API server does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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

TERMINATING, NOT_TERMINATING = "Terminating", "NotTerminating"
BEST_EFFORT, NOT_BEST_EFFORT = "BestEffort", "NotBestEffort"
PRIORITY_CLASS = "PriorityClass"
CROSS_NAMESPACE_AFFINITY = "CrossNamespacePodAffinity"
VOLUME_ATTRIBUTES_CLASS = "VolumeAttributesClass"  # counts claims, never pods


@dataclass(frozen=True)
class PodFacts:
    """What a quota's scopes look at in a pod (``pod_facts``)."""

    priority_class: str | None = None  # spec.priorityClassName
    terminating: bool = False  # spec.activeDeadlineSeconds is set
    best_effort: bool = False  # QoS class BestEffort: no container requests or limits anything
    cross_namespace_affinity: bool = False  # a pod (anti-)affinity term names other namespaces


ANY_POD = PodFacts()
"""A pod no scope singles out: no priority class, not terminating, not BestEffort."""


@dataclass(frozen=True)
class Scope:
    """A ResourceQuota's ``spec.scopes`` and ``spec.scopeSelector.matchExpressions`` (as
    (scopeName, operator, values)); empty: every pod of the namespace."""

    scopes: tuple[str, ...] = ()
    expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Quota:
    """One ResourceQuota: what it leaves for the trainer pods the planner plans (their own
    charge given back), per resource of :data:`CHARGED` that it limits, and which pods it
    counts (``scope``)."""

    namespace: str
    name: str
    left: Amounts
    scope: Scope = field(default_factory=Scope)

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


def scope_of(spec: Mapping[str, Any]) -> Scope:
    """The :class:`Scope` of a ResourceQuota's ``spec``."""
    selector = spec.get("scopeSelector") or {}
    expressions = tuple(
        (
            str(e.get("scopeName")),
            str(e.get("operator")),
            tuple(str(v) for v in e.get("values") or ()),
        )
        for e in selector.get("matchExpressions") or ()
        if isinstance(e, Mapping)
    )
    return Scope(tuple(str(x) for x in spec.get("scopes") or ()), expressions)


def _matches(name: str, operator: str, values: tuple[str, ...], pod: PodFacts) -> bool:
    """One scope (a ``scopes`` entry is ``Exists``) against ``pod``, as the API server's
    quota evaluator decides it. A scope this code does not know counts the pod: a plan
    within a quota that may not apply is only tighter than it needs to be."""
    if name == PRIORITY_CLASS:
        have = pod.priority_class
        if operator == "In":
            return have is not None and have in values
        if operator == "NotIn":
            return have is not None and have not in values
        return have is not None if operator == "Exists" else have is None
    flags = {
        TERMINATING: pod.terminating,
        NOT_TERMINATING: not pod.terminating,
        BEST_EFFORT: pod.best_effort,
        NOT_BEST_EFFORT: not pod.best_effort,
        CROSS_NAMESPACE_AFFINITY: pod.cross_namespace_affinity,
        VOLUME_ATTRIBUTES_CLASS: False,
    }
    if name not in flags:
        return True
    return not flags[name] if operator == "DoesNotExist" else flags[name]


def applies(scope: Scope, pod: PodFacts) -> bool:
    """Whether a quota of ``scope`` counts ``pod``: every scope and every selector
    expression must match it (an unscoped quota counts every pod)."""
    return all(_matches(name, "Exists", (), pod) for name in scope.scopes) and all(
        _matches(name, operator, values, pod) for name, operator, values in scope.expressions
    )


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    """The :class:`PodFacts` of a pod body (dict, the API's field names)."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
    resources = [c.get("resources") or {} for c in containers if isinstance(c, Mapping)]
    affinity = spec.get("affinity") or {}
    terms = [
        term
        for kind in ("podAffinity", "podAntiAffinity")
        for key, entries in (affinity.get(kind) or {}).items()
        for entry in entries or ()
        for term in ((entry or {}).get("podAffinityTerm", entry),)
        if key.endswith("DuringSchedulingIgnoredDuringExecution") and isinstance(term, Mapping)
    ]
    return PodFacts(
        priority_class=spec.get("priorityClassName") or None,
        terminating=spec.get("activeDeadlineSeconds") is not None,
        best_effort=not any(r.get("requests") or r.get("limits") for r in resources),
        cross_namespace_affinity=any(
            t.get("namespaces") or t.get("namespaceSelector") is not None for t in terms
        ),
    )
