"""The operator's own timings: where a control period's time goes, step by step, and the
garbage collector's pauses, which stop every thread of the operator."""

from __future__ import annotations

import gc
from typing import Any

from decor.api import vocabulary
from decor.core.views import ClusterView
from decor.service.config import OperatorConfig
from decor.service.loop import ControlLoop
from decor.service.operator_metrics import OperatorMetrics
from prometheus_client import CollectorRegistry


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def _loop(registry: CollectorRegistry, now: list[float]) -> ControlLoop:
    view = ClusterView()
    body: dict[str, Any] = {"metadata": {"namespace": "ns", "name": "a", "uid": "u"}, "spec": {}}
    view.put_job(body)
    view.replace_pods([])
    return ControlLoop(
        view,
        kube=None,  # type: ignore[arg-type]  # a job without a spec fails before any call
        config=OperatorConfig(),
        operator_metrics=OperatorMetrics(registry),
        clock=lambda: now[0],
    )


def test_a_period_that_ran_jobs_times_each_of_its_steps_once_and_they_add_up() -> None:
    registry = CollectorRegistry()
    now = [1000.0]
    loop = _loop(registry, now)
    loop.run_period()  # the new job is due
    step_count = vocabulary.METRIC_PERIOD_STEP_DURATION + "_count"
    step_sum = vocabulary.METRIC_PERIOD_STEP_DURATION + "_sum"
    counts = {s: _sample(registry, step_count, step=s) for s in vocabulary.PERIOD_STEPS}
    assert counts == dict.fromkeys(vocabulary.PERIOD_STEPS, 1.0)
    steps_s = sum(_sample(registry, step_sum, step=s) for s in vocabulary.PERIOD_STEPS)
    period_s = _sample(registry, vocabulary.METRIC_PERIOD_DURATION + "_sum")
    assert period_s > 0 and abs(steps_s - period_s) < 1e-9
    loop.run_period()  # nothing due (its next period is 10 s away): nothing timed
    assert _sample(registry, step_count, step="plan") == 1.0


def test_garbage_collections_are_timed_by_generation_until_stopped() -> None:
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    count = vocabulary.METRIC_GC_PAUSE + "_count"
    stop = metrics.watch_garbage_collection()
    try:
        gc.collect(2)
        gc.collect(0)
    finally:
        stop()
    assert _sample(registry, count, generation="2") >= 1
    assert _sample(registry, count, generation="0") >= 1
    assert _sample(registry, vocabulary.METRIC_GC_PAUSE + "_sum", generation="2") > 0
    before = _sample(registry, count, generation="2")
    gc.collect(2)  # stopped: no longer counted
    assert _sample(registry, count, generation="2") == before
