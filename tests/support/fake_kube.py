"""A fake of :class:`decor.adapter.kube.Kube` that records every call.

:class:`RecordingKube` stands in for the API server, the scheduler and the kubelet in unit
tests of the job lifecycle: it keeps pods, jobs, claims, Services and Events in memory, as
plain dicts shaped like the API's JSON (what the real facade returns), and appends every
facade call, with its arguments, to :attr:`RecordingKube.record`. What the cluster does on
its own (a pod scheduled, started, resized, gone) is recorded too, as ``kubelet`` entries,
so that a record reads as the story of a scenario.

The model is just enough for the scenarios: pods are placed on the first node (by name) with
room by their requests and start at once; a resize lands at the next
:meth:`RecordingKube.tick` when the node has room; a pod deleted with a grace period (its
trainer checkpoints) is gone at the second tick after, so one period sees it terminating
(grace period 0: gone at once). Nothing reads a wall
clock or draws a random number: times come from the scenario's clock, names from counters.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from decor.adapter.kube import KubeError
from decor.api.model import GPU_RESOURCE, format_cpu, format_time, parse_cpu_cores
from decor.core import build
from decor.core.capacity import pod_charge

Key = tuple[str, str]  # (namespace, name)
SERVICE_IP = "10.96.0.10"
"""The cluster IP every Service created through the fake gets."""


class RecordingKube:
    """Stands in for the API server and kubelet for unit tests of the job lifecycle."""

    def __init__(self, clock: Callable[[], float], nodes: Mapping[str, tuple[float, int]]) -> None:
        """``nodes``: allocatable (CPU cores, ``nvidia.com/gpu``) per node name."""
        self.clock = clock
        self.nodes = dict(nodes)
        self.jobs: dict[Key, dict[str, Any]] = {}
        self.pods: dict[Key, dict[str, Any]] = {}
        self.claims: dict[Key, dict[str, Any]] = {}
        self.services: dict[Key, dict[str, Any]] = {}
        self.limit_ranges: dict[Key, dict[str, Any]] = {}
        """LimitRanges: their Container ``max`` cpu is enforced on create and resize."""
        self.events: list[dict[str, Any]] = []
        self.record: list[dict[str, Any]] = []
        self.unschedulable: str | None = None
        """While set, the scheduler places no pod and says this (as the real one does)."""
        self._failures: dict[str, list[KubeError]] = {}
        self._terminating_ticks: dict[Key, int] = {}
        self._pods_placed = 0

    # --- what a scenario does to the cluster ---------------------------------------------------

    def fail(self, method: str, status: int, message: str, times: int = 1) -> None:
        """Make the next ``times`` calls of ``method`` raise ``KubeError(status, message)``."""
        self._failures.setdefault(method, []).extend(
            KubeError(method, status, message) for _ in range(times)
        )

    def add_job(self, body: Mapping[str, Any]) -> None:
        """A job applied by a user (``kubectl apply``)."""
        job = copy.deepcopy(dict(body))
        self.jobs[_key(job)] = job
        self.record.append({"scenario": "apply job", "name": job["metadata"]["name"]})

    def add_limit_range(self, body: Mapping[str, Any]) -> None:
        """An admin creates a LimitRange (the scenario feeds it to the view, as the watch does)."""
        self.limit_ranges[_key(body)] = copy.deepcopy(dict(body))
        self.record.append({"admin": "LimitRange", "name": body["metadata"]["name"]})

    def patch_job_spec(self, namespace: str, name: str, spec: Mapping[str, Any]) -> None:
        """A user's merge patch of the job's spec; the generation moves as the API server's."""
        job = self.jobs[(namespace, name)]
        job["spec"] = merge_patch(job["spec"], spec)
        job["metadata"]["generation"] = int(job["metadata"].get("generation") or 1) + 1
        self.record.append({"scenario": "patch job spec", "name": name, "spec": dict(spec)})

    def run_other_pod(self, name: str, node: str, cpu_cores: float) -> None:
        """A pod that is not DECOR's starts on ``node`` (placed by hand, as a DaemonSet's)."""
        pod = {
            "metadata": {"name": name, "namespace": "kube-system", "uid": f"uid-{name}"},
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": "main", "resources": {"requests": {"cpu": format_cpu(cpu_cores)}}}
                ],
            },
            "status": {"phase": "Pending"},
        }
        self._start(pod)
        self.pods[("kube-system", name)] = pod
        self.record.append({"scenario": "another pod runs", "pod": name, "node": node})

    def lose_pod(self, namespace: str, name: str) -> None:
        """Someone else deleted the pod (an eviction, ``kubectl delete --force``, a lost node)."""
        del self.pods[(namespace, name)]
        self.record.append({"scenario": "pod deleted by someone else", "pod": name})

    def crash_trainer(self, namespace: str, name: str, container: str = "trainer") -> None:
        """The trainer exits 1 and the kubelet restarts it in place (CrashLoopBackOff)."""
        status = _container_status(self.pods[(namespace, name)], container)
        status["restartCount"] = int(status.get("restartCount") or 0) + 1
        status["lastState"] = {
            "terminated": {"exitCode": 1, "reason": "Error", "finishedAt": self._now_text()}
        }
        status["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
        self.record.append(
            {"kubelet": "trainer crashed", "pod": name, "restartCount": status["restartCount"]}
        )

    def finish_trainer(
        self, namespace: str, name: str, message: str, finished_s: float, container: str = "trainer"
    ) -> None:
        """The trainer exited 0 at ``finished_s`` with ``message`` as its termination message:
        the pod Succeeded."""
        pod = self.pods[(namespace, name)]
        status = _container_status(pod, container)
        status["state"] = {
            "terminated": {
                "exitCode": 0,
                "reason": "Completed",
                "message": message,
                "finishedAt": format_time(finished_s),
            }
        }
        pod["status"]["phase"] = "Succeeded"
        self.record.append({"kubelet": "trainer exited 0", "pod": name, "message": message})

    def tick(self) -> None:
        """What the scheduler and kubelet do between two periods, in a fixed order: pods deleted
        with a grace period go, pending pods are placed and started, resizes land."""
        for key in sorted(self._terminating_ticks):
            self._terminating_ticks[key] -= 1
            if self._terminating_ticks[key] < 0:
                del self._terminating_ticks[key]
                if self.pods.pop(key, None) is not None:
                    self.record.append({"kubelet": "pod gone", "pod": key[1]})
        for key in sorted(self.pods):
            pod = self.pods[key]
            if build.is_terminating(pod):
                continue
            if build.pod_phase(pod) == "Pending" and not pod["spec"].get("nodeName"):
                self._schedule(pod)
            if build.pod_phase(pod) == "Pending" and pod["spec"].get("nodeName"):
                self._start(pod)
            elif build.pod_phase(pod) == "Running":
                self._apply_resize(pod)

    # --- the facade: decor.adapter.kube.Kube's methods -------------------------------------------------

    def patch_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any], uid: str | None = None
    ) -> bool:
        self._call("patch_job_status", namespace=namespace, name=name, status=dict(status), uid=uid)
        job = self.jobs.get((namespace, name))
        if job is None or (uid is not None and job["metadata"].get("uid") != uid):
            return False  # gone, or another job of the name now (the API server's 409)
        job["status"] = merge_patch(job.get("status") or {}, status)
        return True

    def create_pod(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self._call("create_pod", body=dict(body))
        pod = copy.deepcopy(dict(body))
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        if key in self.pods:
            raise KubeError(f"create pod {key[0]}/{key[1]}", 409, "already exists")
        self._admit_limits(pod, f"create pod {key[0]}/{key[1]}")
        meta.update(uid=f"uid-{meta['name']}", creationTimestamp=self._now_text())
        pod["status"] = {"phase": "Pending"}
        self.pods[key] = pod
        return copy.deepcopy(pod)

    def delete_pod(self, namespace: str, name: str, grace_period_s: int | None = None) -> bool:
        self._call("delete_pod", namespace=namespace, name=name, grace_period_s=grace_period_s)
        key = (namespace, name)
        pod = self.pods.get(key)
        if pod is None:
            return False
        if grace_period_s == 0:
            del self.pods[key]
            self._terminating_ticks.pop(key, None)
            return True
        if not build.is_terminating(pod):
            grace_s = 30 if grace_period_s is None else grace_period_s
            pod["metadata"]["deletionTimestamp"] = format_time(self.clock() + grace_s)
            pod["metadata"]["deletionGracePeriodSeconds"] = grace_s
            self._terminating_ticks[key] = 1
        return True

    def resize_pod_cpu(
        self, namespace: str, name: str, container: str, cores: float
    ) -> dict[str, Any]:
        self._call(
            "resize_pod_cpu", namespace=namespace, name=name, container=container, cores=cores
        )
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise KubeError(f"resize pod {namespace}/{name}", 404, "not found")
        asked = copy.deepcopy(pod)
        for target in (asked, pod):  # admitted first, as the API server does
            resources = _container(target, container).setdefault("resources", {})
            resources.setdefault("requests", {})["cpu"] = format_cpu(cores)
            resources.setdefault("limits", {})["cpu"] = format_cpu(cores)
            if target is asked:
                self._admit_limits(asked, f"resize pod {namespace}/{name}")
        return copy.deepcopy(pod)

    def list_limit_ranges(self, namespace: str) -> list[dict[str, Any]]:
        self._call("list_limit_ranges", namespace=namespace)
        return [
            copy.deepcopy(b) for (ns, _), b in sorted(self.limit_ranges.items()) if ns == namespace
        ]

    def pod_proxy_get(self, namespace: str, pod: str, port: int, path: str) -> str:
        self._call("pod_proxy_get", namespace=namespace, pod=pod, port=port, path=path)
        raise KubeError(f"proxy GET {namespace}/{pod}:{port}{path}", 503, "no pod proxy here")

    def create_claim(self, body: Mapping[str, Any]) -> bool:
        self._call("create_claim", body=dict(body))
        key = _key(body)
        if key in self.claims:
            return False
        self.claims[key] = copy.deepcopy(dict(body))
        return True

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._call("get_claim", namespace=namespace, name=name)
        claim = self.claims.get((namespace, name))
        return copy.deepcopy(claim) if claim is not None else None

    def ensure_service(self, body: Mapping[str, Any]) -> str:
        self._call("ensure_service", body=dict(body))
        service = self.services.setdefault(_key(body), copy.deepcopy(dict(body)))
        service.setdefault("spec", {})["clusterIP"] = SERVICE_IP
        return SERVICE_IP

    def post_event(self, body: Mapping[str, Any]) -> None:
        try:
            self._call("post_event", body=dict(body))
        except KubeError:
            return  # Events are best effort: the real facade logs and goes on
        self.events.append(copy.deepcopy(dict(body)))

    # --- inside the fake -----------------------------------------------------------------------

    def _call(self, method: str, **arguments: Any) -> None:
        """Record the call (a deep copy: the caller may change what it passed); raise the
        failure asked for with :meth:`fail`, if any."""
        entry: dict[str, Any] = {"call": method, **copy.deepcopy(arguments)}
        self.record.append(entry)
        failures = self._failures.get(method)
        if failures:
            error = failures.pop(0)
            entry["raised"] = error.status
            raise error

    def _admit_limits(self, pod: Mapping[str, Any], what: str) -> None:
        """The LimitRanger admission plugin, its Container ``max`` cpu alone: 403 when a
        container's cpu limit is above it."""
        namespace = pod["metadata"]["namespace"]
        for (where, name), body in sorted(self.limit_ranges.items()):
            for item in body["spec"]["limits"] if where == namespace else []:
                most = (item.get("max") or {}).get("cpu") if item["type"] == "Container" else None
                for c in pod["spec"]["containers"] if most is not None else []:
                    limit = ((c.get("resources") or {}).get("limits") or {}).get("cpu")
                    if limit is not None and parse_cpu_cores(limit, "") > parse_cpu_cores(most, ""):
                        raise KubeError(what, 403, f"maximum cpu usage per Container is {most}, "
                                        f"but limit is {limit} (LimitRange {name})")  # fmt: skip

    def _now_text(self) -> str:
        return format_time(self.clock())

    def _node_room(self, node: str, without: Key | None = None) -> tuple[float, float]:
        """(cores, GPUs) of ``node`` not held by its pods (but ``without``)."""
        cpu, gpus = self.nodes[node]
        for key, pod in self.pods.items():
            if key != without and pod["spec"].get("nodeName") == node:
                held_cpu, held_gpus = pod_charge(pod)
                cpu -= held_cpu
                gpus -= held_gpus
        return cpu, gpus

    def _schedule(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        cpu, gpus = pod_charge(pod)
        fits = [n for n in sorted(self.nodes) if _fits((cpu, gpus), self._node_room(n))]
        if self.unschedulable is not None or not fits:
            why = self.unschedulable or f"0/{len(self.nodes)} nodes are available: no room"
            conditions = pod["status"].setdefault("conditions", [])
            if not conditions:
                conditions.append(
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": why,
                        "lastTransitionTime": self._now_text(),
                    }
                )
                self.record.append({"kubelet": "unschedulable", "pod": name, "message": why})
            return
        self._pods_placed += 1
        pod["spec"]["nodeName"] = fits[0]
        pod["status"].update(
            podIP=f"10.244.0.{self._pods_placed}",
            conditions=[{"type": "PodScheduled", "status": "True"}],
        )
        self.record.append({"kubelet": "scheduled", "pod": name, "node": fits[0]})

    def _start(self, pod: dict[str, Any]) -> None:
        statuses = []
        for container in pod["spec"].get("containers") or []:
            applied = _cpu_and_memory(container.get("resources") or {})
            statuses.append(
                {
                    "name": container["name"],
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": self._now_text()}},
                    "resources": applied,
                    "allocatedResources": dict(applied.get("requests") or {}),
                }
            )
        pod["status"].update(phase="Running", containerStatuses=statuses)
        self.record.append({"kubelet": "started", "pod": pod["metadata"]["name"]})

    def _apply_resize(self, pod: dict[str, Any]) -> None:
        """A resize asked for lands when the node has room for it; otherwise it waits,
        Deferred (may fit later) or Infeasible (more than the node has)."""
        key = _key(pod)
        for container in pod["spec"].get("containers") or []:
            wanted = _cpu_and_memory(container.get("resources") or {})
            status = _container_status(pod, container["name"])
            conditions = [
                c for c in pod["status"].get("conditions") or [] if c["type"] != "PodResizePending"
            ]
            if status.get("resources") == wanted:  # nothing (more) to apply
                pod["status"]["conditions"] = conditions
                continue
            node = pod["spec"]["nodeName"]
            requested = build.parse_allocation("cpu", wanted["requests"].get("cpu")) or 0.0
            room_cpu, _ = self._node_room(node, without=key)
            if requested <= room_cpu + 1e-9:
                status["resources"] = wanted
                status["allocatedResources"] = dict(wanted["requests"])
                self.record.append(
                    {"kubelet": "resized", "pod": key[1], "cpu": wanted["limits"].get("cpu")}
                )
            else:
                reason = "Infeasible" if requested > self.nodes[node][0] else "Deferred"
                conditions.append(
                    {
                        "type": "PodResizePending",
                        "status": "True",
                        "reason": reason,
                        "message": f"Node didn't have enough capacity: cpu, requested: "
                        f"{round(requested * 1000)}, free: {round(room_cpu * 1000)}",
                    }
                )
                self.record.append({"kubelet": f"resize {reason}", "pod": key[1]})
            pod["status"]["conditions"] = conditions


def node_body(name: str, cpu_cores: float, gpus: int) -> dict[str, Any]:
    """A Ready node with this allocatable, as the node watch delivers it."""
    allocatable = {"cpu": format_cpu(cpu_cores), GPU_RESOURCE: str(gpus)}
    return {
        "metadata": {"name": name},
        "spec": {},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _key(body: Mapping[str, Any]) -> Key:
    meta = body["metadata"]
    return (str(meta.get("namespace") or "default"), str(meta["name"]))


def _fits(asked: tuple[float, float], room: tuple[float, float]) -> bool:
    return asked[0] <= room[0] + 1e-9 and asked[1] <= room[1] + 1e-9


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def _container_status(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in pod["status"]["containerStatuses"] if s["name"] == name)


def _cpu_and_memory(resources: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What the kubelet reports as applied: requests and limits of CPU and memory."""
    return {
        kind: {k: v for k, v in (resources.get(kind) or {}).items() if k in ("cpu", "memory")}
        for kind in ("requests", "limits")
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386): None deletes a field, dicts merge, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, Mapping) else {}
    for field, value in patch.items():
        if value is None:
            merged.pop(field, None)
        else:
            merged[field] = merge_patch(merged.get(field), value)
    return merged
