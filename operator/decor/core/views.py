"""Live in-memory views of jobs, pods, nodes, ResourceQuotas and LimitRanges.

The kopf layer feeds every watch event into one :class:`ClusterView` (no LIST per job per
period); the control loop takes an immutable :class:`Snapshot` of it at the start of each
period. What the snapshot's nodes leave for DECOR's trainers is counted by
:mod:`decor.core.capacity` (``free_capacity``); what a namespace's ResourceQuotas leave for the
planned trainers (:func:`quotas_left`) is a pure function of a snapshot here.
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from decor.api import vocabulary
from decor.api.model import (
    MAX_TEMPLATE_BYTES,
    OVERSIZED_TEMPLATE_KEY,
    quantity_value,
    template_bytes,
    tree_copy,
)
from decor.core import build, quota
from decor.core.capacity import NodeCapacity, PodLoad, node_capacity, pod_load, pod_loads

Key = tuple[str, str]  # (namespace, name)

ListName = tuple[str, str | None]
"""A list that feeds the view: of what, and in which namespace (None: in every one)."""
EVERY_POD: ListName = ("pods", None)
NODES: ListName = ("nodes", None)
QUOTAS: ListName = ("resourcequotas", None)
LIMIT_RANGES: ListName = ("limitranges", None)


def pods_in(namespace: str) -> ListName:
    """The list of ``namespace``'s pods."""
    return ("pods", namespace)


@dataclass(frozen=True)
class Snapshot:
    """One period's frozen view. Pods are the API server's bodies (deep copies), each with
    its :class:`PodLoad` (``loads``: what it holds where, worked out when it came)."""

    jobs: Mapping[Key, dict[str, Any]]
    pods: Mapping[Key, dict[str, Any]]
    nodes: Mapping[str, NodeCapacity]
    nodes_known: bool  # False: the operator cannot see nodes (namespaced install)
    loads: Mapping[Key, PodLoad] = field(default_factory=dict)  # every pod's
    by_owner: Mapping[str, tuple[Key, ...]] = field(default_factory=dict)  # job uid -> pods
    quotas: Mapping[Key, dict[str, Any]] = field(default_factory=dict)  # ResourceQuotas
    limit_ranges: Mapping[Key, dict[str, Any]] = field(default_factory=dict)  # LimitRanges

    def job_pods(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        """Trainer pods owned by the job with ``uid`` (an index lookup, not a scan)."""
        return [self.pods[key] for key in self.by_owner.get(uid, ()) if key[0] == namespace]

    def namespace_limit_ranges(self, namespace: str) -> list[dict[str, Any]]:
        """The LimitRanges of ``namespace``, by name (``limitrange.clip`` reads them)."""
        return [body for key, body in sorted(self.limit_ranges.items()) if key[0] == namespace]

    def trainer_pods(self) -> list[Key]:
        """The trainer pods of the jobs in the view (the ones this operator plans)."""
        uids = {str(body["metadata"].get("uid")) for body in self.jobs.values()}
        return [key for uid in uids for key in self.by_owner.get(uid, ())]


def owner_uid(pod: Mapping[str, Any]) -> str | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == vocabulary.KIND:
            return str(ref.get("uid"))
    return None


def job_label(pod: Mapping[str, Any]) -> str | None:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(vocabulary.LABEL_JOB)


def quotas_left(snapshot: Snapshot, planned: Iterable[Mapping[str, Any]]) -> list[quota.Quota]:
    """What each ResourceQuota leaves for the planned trainers: ``status.hard`` minus
    ``status.used``, plus what the ``planned`` pods (the trainers of the jobs being planned)
    charge now, since the planner hands that out again; per ``quota.CHARGED`` resource it
    limits. A scoped quota gives back only what the pods it counts charge. Only the pods of
    a namespace with a quota are read (``planned`` may be a lazy iterable: none is read when
    no namespace has one)."""
    if not snapshot.quotas:
        return []
    with_quota = {namespace for namespace, _ in snapshot.quotas}
    by_namespace: dict[str, list[tuple[quota.PodFacts, dict[str, float]]]] = {}
    for pod in planned:
        namespace = str((pod.get("metadata") or {}).get("namespace"))
        if namespace not in with_quota:
            continue
        usage = build.pod_quota_usage(pod)
        by_namespace.setdefault(namespace, []).append((quota.pod_facts(pod), usage))
    out = []
    for (namespace, name), body in sorted(snapshot.quotas.items()):
        spec, status = body.get("spec") or {}, body.get("status") or {}
        scope = quota.scope_of(spec)
        back: dict[str, float] = {}
        for facts, usage in by_namespace.get(namespace, ()):
            if quota.applies(scope, facts):
                for resource, amount in usage.items():
                    back[resource] = back.get(resource, 0.0) + amount
        hard, used = status.get("hard") or spec.get("hard") or {}, status.get("used") or {}
        left: dict[str, float] = {}
        for resource, value in hard.items():
            charged = quota.canonical(str(resource))
            limit = quantity_value(value)
            if charged is None or limit is None:
                continue
            spent = quantity_value(used.get(resource)) or 0.0
            free = limit - spent + back.get(charged, 0.0)
            left[charged] = min(left.get(charged, math.inf), max(0.0, free))
        out.append(quota.Quota(namespace, name, tuple(sorted(left.items())), scope))
    return out


def unmanaged_copy(body: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an object without its ``metadata.managedFields`` (the API server's record
    of which client set which field). Nothing here reads it, and it is most of a pod's or a
    job's dicts and lists (about three in four on the scale bed), which every full garbage
    collection walks while the operator waits."""
    out: dict[str, Any] = {}
    for key, value in body.items():
        if key == "metadata" and isinstance(value, Mapping):
            out[key] = {k: tree_copy(v) for k, v in value.items() if k != "managedFields"}
        else:
            out[key] = tree_copy(value)
    return out


def bounded_job(body: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a job for the view (:func:`unmanaged_copy`), its template replaced by its
    size when it is over ``model.MAX_TEMPLATE_BYTES`` (the job is refused for it: nothing
    more is needed)."""
    template = (body.get("spec") or {}).get("template")
    size = template_bytes(template)
    if size <= MAX_TEMPLATE_BYTES:
        return unmanaged_copy(body)
    slim = unmanaged_copy({k: v for k, v in body.items() if k != "spec"})
    spec = {k: tree_copy(v) for k, v in (body.get("spec") or {}).items() if k != "template"}
    slim["spec"] = {**spec, "template": {OVERSIZED_TEMPLATE_KEY: size}}
    return slim


@dataclass
class ClusterView:
    """Thread-safe store fed by watch events; :meth:`snapshot` freezes it for a period."""

    _jobs: dict[Key, dict[str, Any]] = field(default_factory=dict)
    _pods: dict[Key, dict[str, Any]] = field(default_factory=dict)
    _loads: dict[Key, PodLoad] = field(default_factory=dict)  # every pod's, as it came
    _owners: dict[Key, str] = field(default_factory=dict)  # trainer pod -> its job's uid
    _nodes: dict[str, NodeCapacity] = field(default_factory=dict)
    _quotas: dict[Key, dict[str, Any]] = field(default_factory=dict)
    _limit_ranges: dict[Key, dict[str, Any]] = field(default_factory=dict)
    nodes_known: bool = False
    # The lists the watches (adapter.watch) make, and those that have answered once: until
    # then a job's trainer may exist unseen (a period would take it for lost and create
    # another), and the planner would plan without the nodes, quotas and LimitRanges still
    # to come (see :attr:`listed`, :attr:`unlisted_namespaces`).
    _lists_wanted: frozenset[ListName] = frozenset({EVERY_POD})
    _lists_done: set[ListName] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def put_job(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        key = _key(body)
        with self._lock:
            if deleted:
                self._jobs.pop(key, None)
            else:
                self._jobs[key] = bounded_job(body)

    def put_pod(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        key = _key(body)
        slim = None if deleted else _slim_pod(body)
        load = None if slim is None else pod_load(slim)
        with self._lock:
            self._owners.pop(key, None)
            if slim is None or load is None:
                self._pods.pop(key, None)
                self._loads.pop(key, None)
            else:
                self._pods[key] = slim
                self._loads[key] = load
                self._own(key, slim)

    def put_node(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        name = str(body["metadata"]["name"])
        with self._lock:
            self.nodes_known = True
            if deleted:
                self._nodes.pop(name, None)
            else:
                self._nodes[name] = node_capacity(body)

    def put_quota(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        """A ResourceQuota's event (its spec and status are kept)."""
        key = _key(body)
        with self._lock:
            if deleted:
                self._quotas.pop(key, None)
            else:
                self._quotas[key] = _slim_quota(body)

    def replace_quotas(self, bodies: list[dict[str, Any]]) -> None:
        """A fresh LIST of every ResourceQuota."""
        quotas = {_key(b): _slim_quota(b) for b in bodies}
        with self._lock:
            self._quotas = quotas
            self._listed(QUOTAS)

    def put_limit_range(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        """A LimitRange's event (its metadata's name and namespace and its spec are kept)."""
        key = _key(body)
        with self._lock:
            if deleted:
                self._limit_ranges.pop(key, None)
            else:
                self._limit_ranges[key] = _slim_limit_range(body)

    def replace_limit_ranges(self, bodies: list[dict[str, Any]]) -> None:
        """A fresh LIST of every LimitRange."""
        limit_ranges = {_key(b): _slim_limit_range(b) for b in bodies}
        with self._lock:
            self._limit_ranges = limit_ranges
            self._listed(LIMIT_RANGES)

    def expect_lists(self, names: Iterable[ListName]) -> None:
        """The watches that feed the view list these (:data:`EVERY_POD`, :data:`NODES`,
        :data:`QUOTAS`, :data:`LIMIT_RANGES`, :func:`pods_in`; the default: every pod)."""
        with self._lock:
            self._lists_wanted = frozenset(names)

    def _listed(self, name: ListName) -> None:
        """A watch's list has answered (the lock held)."""
        self._lists_done.add(name)

    def _waiting(self) -> frozenset[ListName]:
        with self._lock:
            return self._lists_wanted - self._lists_done

    @property
    def listed(self) -> bool:
        """Every cluster-wide list has answered once."""
        return all(namespace is not None for _, namespace in self._waiting())

    @property
    def unlisted_namespaces(self) -> frozenset[str]:
        """The namespaces whose own pod list has not answered yet (their jobs wait: one the
        operator may not read holds up no other)."""
        return frozenset(namespace for _, namespace in self._waiting() if namespace is not None)

    def replace_pods(self, bodies: list[dict[str, Any]], namespace: str | None = None) -> None:
        """A fresh LIST (a re-listed watch) of every pod, or of ``namespace``'s: that
        namespace's pods are replaced, the others' kept."""
        listed = {_key(b): _slim_pod(b) for b in bodies}
        listed_loads = pod_loads(listed)
        with self._lock:
            if namespace is None:
                pods, loads = listed, listed_loads
            else:
                pods = {k: v for k, v in self._pods.items() if k[0] != namespace} | listed
                loads = {k: v for k, v in self._loads.items() if k[0] != namespace}
                loads |= listed_loads
            self._pods = pods
            self._loads = loads
            self._owners = {}
            for key, body in pods.items():
                self._own(key, body)
            self._listed(EVERY_POD if namespace is None else pods_in(namespace))

    def _own(self, key: Key, body: Mapping[str, Any]) -> None:
        """Index the pod ``key`` under its job's uid when it is a trainer pod (the lock held)."""
        uid = owner_uid(body)
        if uid is not None and job_label(body):
            self._owners[key] = uid

    def replace_nodes(self, bodies: list[dict[str, Any]]) -> None:
        """A fresh LIST of every node."""
        nodes = {str(b["metadata"]["name"]): node_capacity(b) for b in bodies}
        with self._lock:
            self.nodes_known = True
            self._nodes = nodes
            self._listed(NODES)

    def snapshot(self) -> Snapshot:
        """The view now. Bodies are shared, not copied: every update replaces a body whole
        (put_* store deep copies) and nobody mutates one, so a period's snapshot stays as it
        was taken; copying a thousand jobs every period would cost more than the period."""
        with self._lock:
            pods = dict(self._pods)
            loads = dict(self._loads)
            owners = dict(self._owners)
            jobs = dict(self._jobs)
            nodes = dict(self._nodes)
            quotas = dict(self._quotas)
            limit_ranges = dict(self._limit_ranges)
            nodes_known = self.nodes_known
        by_owner: dict[str, list[Key]] = {}
        for key in pods:
            uid = owners.get(key)
            if uid is not None:
                by_owner.setdefault(uid, []).append(key)
        return Snapshot(
            jobs=MappingProxyType(jobs),
            pods=MappingProxyType(pods),
            nodes=MappingProxyType(nodes),
            nodes_known=nodes_known,
            loads=MappingProxyType(loads),
            by_owner=MappingProxyType({uid: tuple(keys) for uid, keys in by_owner.items()}),
            quotas=MappingProxyType(quotas),
            limit_ranges=MappingProxyType(limit_ranges),
        )


def _key(body: Mapping[str, Any]) -> Key:
    meta = body.get("metadata") or {}
    return (str(meta.get("namespace") or "default"), str(meta["name"]))


def _slim_quota(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    return {
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "spec": copy.deepcopy(dict(body.get("spec") or {})),
        "status": copy.deepcopy(dict(body.get("status") or {})),
    }


def _slim_limit_range(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    return {
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "spec": copy.deepcopy(dict(body.get("spec") or {})),
    }


def _slim_pod(body: Mapping[str, Any]) -> dict[str, Any]:
    """Keep what capacity accounting and the loop read; DECOR's trainers are kept whole
    (:func:`unmanaged_copy`)."""
    if job_label(body):
        return unmanaged_copy(body)
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}

    def slim_container(c: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "name": c.get("name"),
            "resources": {"requests": dict((c.get("resources") or {}).get("requests") or {})},
            "restartPolicy": c.get("restartPolicy"),
        }

    return {
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "spec": {
            "nodeName": spec.get("nodeName"),
            "containers": [slim_container(c) for c in spec.get("containers") or []],
            "initContainers": [slim_container(c) for c in spec.get("initContainers") or []],
        },
        "status": {
            "phase": status.get("phase"),
            "containerStatuses": [
                {
                    "name": s.get("name"),
                    "allocatedResources": dict(s.get("allocatedResources") or {}),
                    "resources": {
                        "requests": dict((s.get("resources") or {}).get("requests") or {})
                    },
                }
                for s in status.get("containerStatuses") or []
            ],
        },
    }
