"""The one capacity model (``decor.capacity``): what the planner is given and what the period's
commits reserve come from the same pod and node bodies, so a GPU job the planner admits is
a job whose pods the operator can reserve and create, in the order the loop commits them."""

from __future__ import annotations

from typing import Any

import pytest
from decor import capacity
from decor import planner as pl
from decor.capacity import NodeCapacity, Room
from decor.model import GPU_RESOURCE
from hypothesis import given, settings
from hypothesis import strategies as st
from test_planner import gpu_job


def _pod(
    name: str,
    node: str | None,
    cpu: str,
    gpus: int = 0,
    sidecar_cpu: str | None = None,
    applied_cpu: str | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu}
    if gpus:
        requests[GPU_RESOURCE] = str(gpus)
    containers: list[dict[str, Any]] = [{"name": "trainer", "resources": {"requests": requests}}]
    if sidecar_cpu is not None:
        containers.append({"name": "metrics", "resources": {"requests": {"cpu": sidecar_cpu}}})
    status: dict[str, Any] = {"phase": phase}
    if applied_cpu is not None:
        status["containerStatuses"] = [
            {"name": "trainer", "resources": {"requests": {"cpu": applied_cpu}}}
        ]
    spec: dict[str, Any] = {"containers": containers}
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": {"namespace": "ns", "name": name}, "spec": spec, "status": status}


def _free(**nodes: tuple[float, float]) -> dict[str, NodeCapacity]:
    return {name: NodeCapacity(name, cpu, gpus) for name, (cpu, gpus) in nodes.items()}


def test_the_planner_is_not_given_what_trainer_pods_hold_beside_their_trainers() -> None:
    pods = {
        ("ns", "t1"): _pod("t1", "a", "2", sidecar_cpu="100m"),
        ("ns", "t2"): _pod("t2", None, "1", sidecar_cpu="100m"),  # not placed: counted apart
    }
    nodes = capacity.planner_nodes(
        _free(b=(4.0, 2.0), a=(3.0, 0.0)), pods, set(pods), unplaced_overhead_cpu_cores=0.05
    )
    assert [n.name for n in nodes] == ["a", "b"]  # by name
    assert nodes[0].cpu_cores == pytest.approx(3.0 - 0.1 - 0.05) and nodes[0].gpus == 0.0
    assert nodes[1].cpu_cores == pytest.approx(4.0 - 0.05) and nodes[1].gpus == 2.0
    tight = capacity.planner_nodes(_free(a=(0.1, 0.0)), pods, set(pods), 0.05)
    assert tight[0].cpu_cores == 0.0  # never below nothing


def test_the_room_for_commits_is_free_less_what_trainers_hold_now() -> None:
    pods = {
        ("ns", "resizing"): _pod("resizing", "a", "1", applied_cpu="2"),  # max(asked, applied)
        ("ns", "gpu"): _pod("gpu", "b", "1", gpus=2),
        ("ns", "done"): _pod("done", "a", "4", phase="Succeeded"),  # holds nothing
        ("ns", "pending"): _pod("pending", None, "8"),  # on no node yet
        ("ns", "gone-node"): _pod("gone-node", "cordoned", "8"),  # not a node DECOR may use
    }
    room = capacity.grow_room(_free(a=(3.0, 0.0), b=(2.0, 4.0)), pods, set(pods))
    assert room.free == {"a": [pytest.approx(1.0), 0.0], "b": [pytest.approx(1.0), 2.0]}
    assert capacity.grow_room(None, pods, set(pods)).free is None  # nodes unseen: no limit


def test_only_decor_trainers_are_left_to_the_planner() -> None:
    nodes = {"a": NodeCapacity("a", 4.0, 4.0), "down": NodeCapacity("down", 8.0, 8.0, False)}
    pods = {("ns", "other"): _pod("other", "a", "1", gpus=1), ("ns", "t"): _pod("t", "a", "2")}
    free = capacity.free_capacity(nodes, pods, decor_pods={("ns", "t")})
    assert free == {"a": NodeCapacity("a", 3.0, 3.0)}


def test_gpu_counts_and_placement_per_node() -> None:
    assert capacity.pod_gpu_counts(10, 3) == [3, 3, 2, 2]
    assert capacity.whole_gpus(3.9999999) == 4.0 and capacity.whole_gpus(-0.5) == 0.0
    assert capacity.per_node((("a", 3.0), ("a", 3.0), ("b", 2.0))) == {"a": 6.0, "b": 2.0}


NODES = st.lists(
    st.tuples(st.integers(0, 8), st.integers(0, 4)),  # (allocatable GPUs, GPUs other pods hold)
    min_size=1,
    max_size=4,
)
JOBS = st.lists(
    st.tuples(st.integers(1, 12), st.integers(0, 4), st.integers(100, 2000)),
    min_size=1,
    max_size=4,
)  # (need, gpus per pod, deadline s)


@settings(max_examples=200, deadline=None, database=None)
@given(cluster=NODES, jobs=JOBS)
def test_admitted_new_gpu_jobs_are_reserved_in_commit_order_on_the_same_model(
    cluster: list[tuple[int, int]], jobs: list[tuple[int, int, int]]
) -> None:
    """Snapshot in, as the loop runs a period: the planner's nodes and the commits' room come
    from the same bodies, and every admitted grant's pods are reserved, earliest deadline
    first (``loop._commit_order``), where the planner placed them."""
    allocatable = {
        f"n{i}": NodeCapacity(f"n{i}", 32.0, float(g)) for i, (g, _) in enumerate(cluster)
    }
    pods = {
        ("other", f"n{i}"): _pod(f"p{i}", f"n{i}", "500m", gpus=min(held, g))
        for i, (g, held) in enumerate(cluster)
        if min(held, g)
    }
    free = capacity.free_capacity(allocatable, pods, decor_pods=set())
    nodes = capacity.planner_nodes(free, pods, set(), unplaced_overhead_cpu_cores=0.1)
    demands = [
        gpu_job(f"ns/j{i}", need=float(need), max_allocation=float(need), gpus_per_pod=per_pod,
                deadline_s=float(deadline))
        for i, (need, per_pod, deadline) in enumerate(jobs)
    ]  # fmt: skip
    grants = pl.plan(demands, nodes, 0.0, pl.PlannerSettings()).grants
    room = capacity.grow_room(free, pods, set())
    by_deadline = sorted(demands, key=lambda d: (d.deadline_s, d.key))
    for demand in by_deadline:
        grant = grants[demand.key]
        if grant.allocation > 0:
            assert room.take_placement(grant.pods), (grant, room.free)
    assert all(cpu >= 0 and gpus >= -1e-9 for cpu, gpus in (room.free or {}).values())


def test_the_case_that_waited_for_room_for_ever() -> None:
    """gpusPerPod 3 on nodes with 6 and 4 free GPUs: the planner admits 10 as 3 + 3 and
    2 + 2, and the commit reserves exactly that."""
    free = _free(a=(32.0, 6.0), b=(32.0, 4.0))
    nodes = capacity.planner_nodes(free, {}, set(), 0.0)
    demand = gpu_job("ns/j", need=10.0, max_allocation=10.0, gpus_per_pod=3)
    grant = pl.plan([demand], nodes, 0.0, pl.PlannerSettings()).grants["ns/j"]
    assert grant.allocation == 10.0
    assert sorted(grant.pods) == [("a", 3.0), ("a", 3.0), ("b", 2.0), ("b", 2.0)]
    room: Room = capacity.grow_room(free, {}, set())
    assert room.take_placement(grant.pods)
    assert room.free == {"a": [32.0, 0.0], "b": [32.0, 0.0]}
