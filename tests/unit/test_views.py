"""Capacity accounting from the live views: what a node can still give DECOR's trainers."""

from __future__ import annotations

from typing import Any

import pytest
from decor.api import vocabulary
from decor.core import build
from decor.core.capacity import (
    PodLoad,
    Room,
    free_capacity,
    node_capacity,
    pod_charge,
    pod_load,
)
from decor.core.views import ClusterView, pods_in


def _node(name: str, cpu: str, gpus: str | None = None, ready: bool = True) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": "8Gi"}
    if gpus is not None:
        allocatable[build.GPU_RESOURCE] = gpus
    return {
        "metadata": {"name": name},
        "spec": {},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _pod(
    name: str,
    node: str | None,
    cpu: str,
    *,
    namespace: str = "ns",
    applied: str | None = None,
    allocated: str | None = None,
    phase: str = "Running",
    job: str | None = None,
    sidecar_cpu: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "containerStatuses": []}
    if applied is not None or allocated is not None:
        entry: dict[str, Any] = {"name": "main"}
        if applied is not None:
            entry["resources"] = {"requests": {"cpu": applied}, "limits": {"cpu": applied}}
        if allocated is not None:
            entry["allocatedResources"] = {"cpu": allocated}
        status["containerStatuses"].append(entry)
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}],
    }
    if node:
        spec["nodeName"] = node
    if sidecar_cpu:
        spec["initContainers"] = [
            {
                "name": "metrics",
                "restartPolicy": "Always",
                "resources": {"requests": {"cpu": sidecar_cpu}},
            },
            {"name": "setup", "resources": {"requests": {"cpu": "4"}}},  # ran before: free
        ]
    labels = {vocabulary.LABEL_JOB: job} if job else {}
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
        "status": status,
    }


@pytest.mark.parametrize(
    ("pod", "cores"),
    [
        (_pod("p", "n", "500m"), 0.5),
        # a shrink asked but not applied yet holds the larger, applied size
        (_pod("p", "n", "500m", applied="1500m", allocated="1500m"), 1.5),
        # a grow asked and allocated by the kubelet holds the new size
        (_pod("p", "n", "1", applied="500m", allocated="1"), 1.0),
        # native sidecars run beside the containers; ordinary init containers do not count
        (_pod("p", "n", "1", sidecar_cpu="10m"), 1.01),
        (_pod("p", "n", "1", phase="Succeeded"), 0.0),
    ],
)
def test_a_pod_is_charged_what_the_kubelet_counts(pod: dict[str, Any], cores: float) -> None:
    assert pod_charge(pod)[0] == pytest.approx(cores)


def test_free_capacity_is_allocatable_minus_every_other_pod() -> None:
    view = ClusterView()
    view.put_node(_node("a", "2", gpus="4"))
    view.put_node(_node("b", "4"))
    view.put_node(_node("down", "8", ready=False))
    view.put_pod(_pod("system", "a", "250m", namespace="kube-system"))
    view.put_pod(_pod("trainer", "a", "1", job="j"))
    view.put_pod(_pod("elsewhere", "b", "3500m", namespace="other"))
    view.put_pod(_pod("unscheduled", None, "2", namespace="other"))
    snapshot = view.snapshot()
    free = free_capacity(snapshot.nodes, snapshot.loads, decor_pods={("ns", "trainer")})
    assert set(free) == {"a", "b"}  # a node that is not Ready holds nothing
    assert free["a"].cpu_cores == pytest.approx(1.75) and free["a"].gpus == 4
    assert free["b"].cpu_cores == pytest.approx(0.5)
    # a deleted pod gives its room back
    view.put_pod(_pod("elsewhere", "b", "3500m", namespace="other"), deleted=True)
    snapshot = view.snapshot()
    assert free_capacity(snapshot.nodes, snapshot.loads, set())["b"].cpu_cores == pytest.approx(4.0)


def test_each_pod_s_load_is_worked_out_as_it_comes_and_follows_its_events() -> None:
    view = ClusterView()
    view.put_pod(_pod("t", "a", "1", job="j", sidecar_cpu="100m"))
    view.put_pod(_pod("o", None, "2", namespace="other"))
    snapshot = view.snapshot()
    assert dict(snapshot.loads) == {key: pod_load(pod) for key, pod in snapshot.pods.items()}
    assert snapshot.loads[("ns", "t")] == PodLoad("a", pytest.approx(1.1), 0.0, 0.1)
    view.put_pod(_pod("o", "b", "3", namespace="other"))  # scheduled, and bigger
    assert view.snapshot().loads[("other", "o")] == PodLoad("b", 3.0, 0.0, 0.0)
    view.put_pod(_pod("o", "b", "3", namespace="other"), deleted=True)
    assert ("other", "o") not in view.snapshot().loads
    view.replace_pods([_pod("x", "a", "500m", namespace="other")])  # a new list: only its pods
    assert dict(view.snapshot().loads) == {("other", "x"): PodLoad("a", 0.5, 0.0, 0.0)}


def test_a_namespace_s_pod_list_replaces_its_pods_alone() -> None:
    def trainer(name: str) -> dict[str, Any]:
        pod = _pod(name, "a", "1", job="j")
        pod["metadata"]["ownerReferences"] = [{"kind": vocabulary.KIND, "uid": "uid-j"}]
        return pod

    view = ClusterView()
    view.expect_lists([pods_in("ns"), pods_in("other")])
    view.put_pod(trainer("t"))
    view.put_pod(trainer("gone"))  # deleted while the watch was down
    view.put_pod(_pod("o", "b", "2", namespace="other"))
    view.replace_pods([trainer("t"), trainer("new")], "ns")
    snapshot = view.snapshot()
    assert set(snapshot.pods) == set(snapshot.loads) == {("ns", "t"), ("ns", "new"), ("other", "o")}
    assert set(snapshot.by_owner.get("uid-j", ())) == {("ns", "t"), ("ns", "new")}
    assert view.unlisted_namespaces == {"other"}  # its jobs wait; those of "ns" need not
    view.replace_pods([], "other")
    assert view.listed and not view.unlisted_namespaces
    assert set(view.snapshot().pods) == {("ns", "t"), ("ns", "new")}


def test_slim_views_keep_what_accounting_reads() -> None:
    view = ClusterView()
    big = _pod("other", "a", "750m", applied="1", allocated="1")
    big["spec"]["volumes"] = [{"name": "x", "emptyDir": {}}] * 50
    view.put_pod(big)
    kept = view.snapshot().pods[("ns", "other")]
    assert "volumes" not in kept["spec"]
    assert pod_charge(kept) == pod_charge(big)
    trainer = _pod("t", "a", "1", job="j")
    trainer["spec"]["volumes"] = [{"name": "x", "emptyDir": {}}]
    view.put_pod(trainer)
    assert view.snapshot().pods[("ns", "t")]["spec"]["volumes"]  # DECOR's own are kept whole


def test_trainer_pods_and_jobs_are_kept_whole_but_their_field_ownership() -> None:
    managed = [{"manager": "kubelet", "fieldsV1": {"f:status": {"f:phase": {}}}}]
    trainer = _pod("t", "a", "1", job="j")
    trainer["metadata"]["managedFields"] = managed
    job = {
        "apiVersion": "decor.dev/v1alpha1",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u", "managedFields": managed},
        "spec": {"template": {"spec": {"containers": [{"name": "main"}]}}},
        "status": {"phase": "Running"},
    }
    view = ClusterView()
    view.put_pod(trainer)
    view.put_job(job)
    snapshot = view.snapshot()
    for kept, came in ((snapshot.pods[("ns", "t")], trainer), (snapshot.jobs[("ns", "j")], job)):
        assert "managedFields" not in kept["metadata"]
        assert kept == {**came, "metadata": {k: v for k, v in came["metadata"].items()
                                             if k != "managedFields"}}  # fmt: skip
    assert trainer["metadata"]["managedFields"] == managed  # what came is not changed


def test_a_cordoned_node_is_not_offered() -> None:
    node = _node("a", "2")
    node["spec"]["unschedulable"] = True
    assert not node_capacity(node).schedulable


def test_room_lets_grows_take_only_what_is_free_now() -> None:
    room = Room({"a": (1.0, 0.0), "b": (0.25, 2.0)})
    assert room.take("a", cpu=0.75)
    assert not room.take("a", cpu=0.5)  # 0.25 left
    assert room.take_up_to("a", 0.2) == pytest.approx(0.2)
    assert room.take_up_to("a", 0.2) == pytest.approx(0.05)  # what was left
    assert room.take(None, cpu=0.25)  # any node with room: b (a is full)
    assert room.take(None, gpus=2)  # only b has GPUs
    assert not room.take("b", gpus=1)  # and now none left
    assert not room.take(None, cpu=0.1, gpus=1)
    unlimited = Room(None)
    assert unlimited.take("anything", cpu=1e6) and unlimited.take_up_to(None, 3.0) == 3.0


def test_limit_ranges_are_kept_per_namespace_slim_and_frozen_per_period() -> None:
    def limit_range(namespace: str, name: str, most: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": namespace, "managedFields": [{"x": 1}]},
            "spec": {"limits": [{"type": "Container", "max": {"cpu": most}}]},
        }

    view = ClusterView()
    view.replace_limit_ranges([limit_range("ml", "b", "1"), limit_range("other", "a", "2")])
    view.put_limit_range(limit_range("ml", "a", "500m"))
    before = view.snapshot()
    view.put_limit_range(limit_range("ml", "b", "1"), deleted=True)
    assert [b["metadata"]["name"] for b in before.namespace_limit_ranges("ml")] == ["a", "b"]
    assert before.namespace_limit_ranges("ml")[0] == {
        "metadata": {"name": "a", "namespace": "ml"},
        "spec": {"limits": [{"type": "Container", "max": {"cpu": "500m"}}]},
    }
    assert [b["metadata"]["name"] for b in view.snapshot().namespace_limit_ranges("ml")] == ["a"]
    assert view.snapshot().namespace_limit_ranges("nowhere") == []
