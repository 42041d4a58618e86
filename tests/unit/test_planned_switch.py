"""A GPU job whose law plans fewer GPUs now and one switch up later: the planner holds the
GPUs of the switch (``Demand.planned_peak``), so no other job is admitted into them, and a
switch the planner refuses is re-planned at once within what was granted.

Planner tables first, then the law's side, then closed loops of law and planner together.
Speed curves are exact: ``step_time = a / g``; times are seconds from 0.
"""

from __future__ import annotations

from collections.abc import Callable

from decor.api import vocabulary
from decor.core import planner as pl
from decor.core.planner import Demand, Node, PlannerSettings


def per_gpu(a: float = 2.4) -> Callable[[float], float]:
    """Seconds per step at ``g`` GPUs: linear speed-up."""
    return lambda g: a / g


def gpu_demand(key: str, **kw: object) -> Demand:
    """A GPU deadline job on node n1: need 1 of [1, 4] GPUs, 100 steps, deadline 1,000 s."""
    base: dict[str, object] = dict(
        key=key, mode="gpu", need=1.0, min_allocation=1.0, max_allocation=4.0, current=0.0,
        steps_remaining=100.0, deadline_s=1000.0, arrival_s=0.0, step_time_s=per_gpu(),
        node=None,
    )  # fmt: skip
    base.update(kw)
    return Demand(**base)  # type: ignore[arg-type]


def plan(*demands: Demand, gpus: float = 4.0, now_s: float = 0.0) -> dict[str, pl.Grant]:
    nodes = [Node("n1", 32.0, gpus)]
    return dict(pl.plan(demands, nodes, now_s, PlannerSettings()).grants)


# A runs at 3 of the node's 4 GPUs and its law plans a switch to 4 later; B, a new job with
# an earlier deadline, needs 1 GPU.
RUNNING_3_THEN_4 = gpu_demand("a", need=3.0, current=3.0, admitted=True, node="n1",
                              planned_peak=4.0)  # fmt: skip
NEW_NEEDS_1 = gpu_demand("b", need=1.0, deadline_s=900.0, arrival_s=10.0)


def test_the_planned_switch_up_is_not_given_to_another_job() -> None:
    first = plan(RUNNING_3_THEN_4, NEW_NEEDS_1)
    # A is granted and placed at what it runs now; the GPU of its switch is held for it
    assert (first["a"].allocation, first["a"].pods) == (3.0, (("n1", 3.0),))
    assert first["a"].verdict == vocabulary.VERDICT_ADMITTED
    assert "planned switch to 4" in first["a"].reason
    assert first["b"].verdict == vocabulary.VERDICT_QUEUED, first["b"].reason
    # the next period A's law switches up: the planner grants it
    switch = plan(replace_demand(RUNNING_3_THEN_4, need=4.0, planned_peak=0.0), NEW_NEEDS_1)
    assert switch["a"].allocation == 4.0 and switch["a"].verdict == vocabulary.VERDICT_ADMITTED


def replace_demand(d: Demand, **kw: object) -> Demand:
    from dataclasses import replace

    return replace(d, **kw)  # type: ignore[arg-type]
