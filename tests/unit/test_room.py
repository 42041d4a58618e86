"""The operator's per-period room (``capacity.Room``) agrees with the planner: a GPU job the
planner admits is a job whose pods the operator can reserve and create.

Once, with ``gpusPerPod: 3`` and nodes of 6 and 4 free GPUs, the planner admitted 10 GPUs as
3 + 3 and 2 + 2 while ``Room.take_pods([3, 3, 2, 2])`` (largest-first best fit) refused them,
and the job waited "for room" for ever.
"""

from __future__ import annotations

import pytest
from decor.core import planner as pl
from decor.core.capacity import Room
from hypothesis import given, settings
from hypothesis import strategies as st
from test_planner import gpu_job


def room(*free_gpus: int) -> Room:
    return Room({chr(ord("a") + i): (32.0, float(g)) for i, g in enumerate(free_gpus)})


def test_pods_the_planner_packs_fit_the_room() -> None:
    assert room(6, 4).take_pods([3, 3, 2, 2])
    assert room(6, 4).take_pods(pl.pod_gpu_counts(10, 3))


def test_what_does_not_fit_is_refused_and_takes_nothing() -> None:
    r = room(6, 4)
    assert not r.take_pods([3, 3, 3, 3])  # 12 GPUs on 10
    assert r.take_pods([3, 3, 2, 2])  # nothing was taken by the refusal


def test_the_planners_placement_is_reserved_as_it_is() -> None:
    r = room(6, 4)
    assert r.take_placement((("a", 3.0), ("a", 3.0), ("b", 2.0), ("b", 2.0)))
    assert r.free == {"a": [32.0, 0.0], "b": [32.0, 0.0]}
    assert not r.take_placement((("b", 1.0),))
    assert not r.take_placement((("a", 1.0), ("nowhere", 1.0)))
    assert r.free == {"a": [32.0, 0.0], "b": [32.0, 0.0]}  # all or nothing


JOBS = st.lists(
    st.tuples(st.integers(1, 12), st.integers(0, 4)),  # (need, gpus per pod)
    min_size=1,
    max_size=4,
)


@settings(max_examples=300, deadline=None, database=None)
@given(free=st.lists(st.integers(0, 8), min_size=1, max_size=4), jobs=JOBS, order=st.randoms())
def test_every_admitted_grant_can_be_reserved_in_any_order(
    free: list[int], jobs: list[tuple[int, int]], order: object
) -> None:
    nodes = [pl.Node(chr(ord("a") + i), 32.0, float(g)) for i, g in enumerate(free)]
    demands = [
        gpu_job(f"j{i}", need=float(need), max_allocation=float(need), gpus_per_pod=per_pod)
        for i, (need, per_pod) in enumerate(jobs)
    ]
    grants = pl.plan(demands, nodes, 0.0, pl.PlannerSettings()).grants
    admitted = [g for g in grants.values() if g.allocation > 0 and g.pods]
    order.shuffle(admitted)  # type: ignore[attr-defined]  # jobs commit concurrently
    r = Room({n.name: (n.cpu_cores, n.gpus) for n in nodes})
    for grant in admitted:
        assert r.take_placement(grant.pods), (grant, r.free)
    # and each grant alone also fits by counts, as the operator reserves without a plan
    for grant in admitted:
        demand = next(d for d in demands if d.key == grant.key)
        counts = pl.pod_gpu_counts(round(grant.allocation), demand.gpus_per_pod)
        alone = Room({n.name: (n.cpu_cores, n.gpus) for n in nodes})
        assert alone.take_pods(counts), (grant, counts)


@pytest.mark.parametrize(("free", "counts"), [((6, 4), [3, 3, 2, 2]), ((2, 2, 2), [2, 2, 2])])
def test_regression_cases(free: tuple[int, ...], counts: list[int]) -> None:
    assert room(*free).take_pods(counts)
