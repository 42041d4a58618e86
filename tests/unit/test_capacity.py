"""The one capacity model (``decor.core.capacity``): what the planner is given and what the period's
commits reserve come from the same pod and node bodies, so a GPU job the planner admits is
a job whose pods the operator can reserve and create, in the order the loop commits them."""

from __future__ import annotations

from typing import Any

import pytest
from decor.api.model import GPU_RESOURCE, parse_job
from decor.api.vocabulary import VERDICT_ADMITTED
from decor.core import build, capacity
from decor.core import planner as pl
from decor.core.capacity import NodeCapacity, Room
from decor.service.job import JobController
from hypothesis import given, settings
from hypothesis import strategies as st
from support.scenario import job_body
from test_planner import gpu_job, job


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
        _free(b=(4.0, 2.0), a=(3.0, 0.0)),
        capacity.pod_loads(pods),
        set(pods),
        unplaced_overhead_cpu_cores=0.05,
    )
    assert [n.name for n in nodes] == ["a", "b"]  # by name
    assert nodes[0].cpu_cores == pytest.approx(3.0 - 0.1 - 0.05) and nodes[0].gpus == 0.0
    assert nodes[1].cpu_cores == pytest.approx(4.0 - 0.05) and nodes[1].gpus == 2.0
    tight = capacity.planner_nodes(_free(a=(0.1, 0.0)), capacity.pod_loads(pods), set(pods), 0.05)
    assert tight[0].cpu_cores == 0.0  # never below nothing


def test_the_room_for_commits_is_free_less_what_trainers_hold_now() -> None:
    pods = {
        ("ns", "resizing"): _pod("resizing", "a", "1", applied_cpu="2"),  # max(asked, applied)
        ("ns", "gpu"): _pod("gpu", "b", "1", gpus=2),
        ("ns", "done"): _pod("done", "a", "4", phase="Succeeded"),  # holds nothing
        ("ns", "pending"): _pod("pending", None, "8"),  # on no node yet
        ("ns", "gone-node"): _pod("gone-node", "cordoned", "8"),  # not a node DECOR may use
    }
    loads = capacity.pod_loads(pods)
    room = capacity.grow_room(_free(a=(3.0, 0.0), b=(2.0, 4.0)), loads, set(pods))
    assert room.free == {"a": [pytest.approx(1.0), 0.0], "b": [pytest.approx(1.0), 2.0]}
    assert capacity.grow_room(None, loads, set(pods)).free is None  # nodes unseen: no limit


def test_only_decor_trainers_are_left_to_the_planner() -> None:
    nodes = {"a": NodeCapacity("a", 4.0, 4.0), "down": NodeCapacity("down", 8.0, 8.0, False)}
    pods = {("ns", "other"): _pod("other", "a", "1", gpus=1), ("ns", "t"): _pod("t", "a", "2")}
    free = capacity.free_capacity(nodes, capacity.pod_loads(pods), decor_pods={("ns", "t")})
    assert free == {"a": NodeCapacity("a", 3.0, 3.0)}


def test_gpu_counts_and_placement_per_node() -> None:
    assert capacity.pod_gpu_counts(10, 3) == [3, 3, 2, 2]
    assert capacity.whole_gpus(3.9999999) == 4.0 and capacity.whole_gpus(-0.5) == 0.0
    assert capacity.per_node((("a", 3.0), ("a", 3.0), ("b", 2.0))) == {"a": 6.0, "b": 2.0}


NODES = st.lists(
    st.tuples(st.integers(1, 8), st.integers(0, 8), st.integers(0, 4)),
    min_size=1,
    max_size=4,
)  # (allocatable cores, allocatable GPUs, GPUs other pods hold)
JOBS = st.lists(
    st.tuples(st.booleans(), st.integers(1, 12), st.integers(0, 4), st.integers(100, 2000)),
    min_size=1,
    max_size=5,
)  # (a GPU job, need in cores or GPUs, GPUs per pod, deadline s)
OVERHEAD_CORES = 0.1
"""What each new trainer pod holds beside its trainer (the metrics sidecar)."""


def _demand(i: int, gpu: bool, need: int, per_pod: int, deadline_s: int) -> pl.Demand:
    if gpu:
        return gpu_job(f"ns/j{i}", need=float(need), max_allocation=float(need),
                       gpus_per_pod=per_pod, deadline_s=float(deadline_s))  # fmt: skip
    cores = need / 2.0
    return job(f"ns/j{i}", need=cores, min_allocation=cores, max_allocation=cores,
               deadline_s=float(deadline_s))  # fmt: skip


@settings(max_examples=300, deadline=None, database=None)
@given(cluster=NODES, jobs=JOBS)
def test_admitted_new_jobs_are_reserved_in_commit_order_on_the_same_model(
    cluster: list[tuple[int, int, int]], jobs: list[tuple[bool, int, int, int]]
) -> None:
    """Snapshot in, as the loop runs a period: the planner's nodes and the commits' room come
    from the same bodies, and every admitted grant's new pods are reserved (``Room.take_new``,
    as a job's commit does), earliest deadline first (``loop._commit_order``), where the
    planner placed them. (Reserving a CPU trainer on the first node with room, not the
    planner's, fails here: nodes of 1, 2 and 1 cores, admitted jobs of 1, 1 and 2 cores.)"""
    allocatable = {
        f"n{i}": NodeCapacity(f"n{i}", float(c), float(g)) for i, (c, g, _) in enumerate(cluster)
    }
    pods = {
        ("other", f"n{i}"): _pod(f"p{i}", f"n{i}", "250m", gpus=min(held, g))
        for i, (_, g, held) in enumerate(cluster)
    }
    demands = [_demand(i, *each) for i, each in enumerate(jobs)]
    loads = capacity.pod_loads(pods)
    free = capacity.free_capacity(allocatable, loads, decor_pods=set())
    nodes = capacity.planner_nodes(free, loads, set(), OVERHEAD_CORES * len(demands))
    grants = pl.plan(demands, nodes, 0.0, pl.PlannerSettings()).grants
    room = capacity.grow_room(free, loads, set())
    for d in sorted(demands, key=lambda d: (d.deadline_s, d.key)):
        grant = grants[d.key]
        if grant.allocation <= 0:
            continue
        if d.mode == "gpu":
            counts = capacity.pod_gpu_counts(round(grant.allocation), d.gpus_per_pod)
            assert room.take_new(grant.pods, gpu_counts=counts), (grant, room.free)
        else:
            assert room.take_new(grant.pods, cores=grant.allocation + OVERHEAD_CORES), (
                grant,
                room.free,
            )


def test_a_cpu_trainer_is_reserved_on_the_planners_node() -> None:
    free = _free(n0=(1.0, 0.0), n1=(2.0, 0.0), n2=(1.0, 0.0))
    nodes = capacity.planner_nodes(free, {}, set(), 0.0)
    demands = [
        job(f"ns/j{i}", need=c, min_allocation=c, max_allocation=c) for i, c in enumerate([1, 1, 2])
    ]
    grants = pl.plan(demands, nodes, 0.0, pl.PlannerSettings()).grants
    assert {g.node for g in grants.values()} == {"n0", "n1", "n2"}  # every job admitted
    room = capacity.grow_room(free, {}, set())
    for d in demands:  # (one deadline: commit order by name)
        assert room.take_new(grants[d.key].pods, cores=grants[d.key].allocation)
    assert room.free == {"n0": [0.0, 0.0], "n1": [0.0, 0.0], "n2": [0.0, 0.0]}
    assert capacity.Room({"n0": (1.0, 0.0)}).take_new((), cores=1.0)  # no plan: any node


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


def test_a_jobs_commit_reserves_a_new_cpu_trainer_on_the_planners_node() -> None:
    spec = parse_job(job_body("j", minimum="1", maximum="2"))
    room = Room({"n0": (4.0, 0.0), "n1": (2.5, 0.0)})  # n0 first by name, and room on both
    grant = pl.Grant("ns/j", 2.0, "n1", VERDICT_ADMITTED, "admitted", None, (("n1", 2.0),))
    assert JobController._room_for_trainer(spec, grant, 2.0, room)
    overhead = build.job_overhead_cpu_cores(spec)
    assert room.free == {"n0": [4.0, 0.0], "n1": [pytest.approx(0.5 - overhead), 0.0]}
