"""Which jobs a period runs: those whose own period has come, and a job whose spec changed
first and alone, so that its answer does not wait behind every other due job."""

from __future__ import annotations

from typing import Any

from decor.handlers import OperatorConfig, OperatorMetrics
from decor.loop import ControlLoop
from decor.views import ClusterView
from prometheus_client import CollectorRegistry


def _body(name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}"}, "spec": {}}


def _loop(names: list[str], now: list[float]) -> ControlLoop:
    view = ClusterView()
    for name in names:
        view.put_job(_body(name))
    return ControlLoop(
        view,
        kube=None,  # type: ignore[arg-type]  # choosing due jobs makes no call
        config=OperatorConfig(),
        operator_metrics=OperatorMetrics(CollectorRegistry()),
        clock=lambda: now[0],
    )


def test_new_jobs_are_due_then_each_when_its_period_has_come() -> None:
    now = [1000.0]
    loop = _loop(["a", "b", "c"], now)
    snapshot = loop.view.snapshot()
    assert loop._due_jobs(snapshot, now[0]) == [("ns", "a"), ("ns", "b"), ("ns", "c")]
    loop.controllers["ns", "a"].next_due_s = 1010.0
    loop.controllers["ns", "b"].next_due_s = 1005.0
    loop.controllers["ns", "c"].next_due_s = 1020.0
    assert loop._due_jobs(snapshot, 1004.0) == []
    assert loop._due_jobs(snapshot, 1010.0) == [("ns", "a"), ("ns", "b")]


def test_a_job_whose_spec_changed_runs_first_and_alone() -> None:
    now = [1000.0]
    loop = _loop(["a", "b", "c"], now)
    snapshot = loop.view.snapshot()
    loop._due_jobs(snapshot, now[0])
    for key in loop.controllers:
        loop.controllers[key].next_due_s = 1010.0  # all three due at 1010
    loop.wake(("ns", "c"))
    assert loop._due_jobs(snapshot, 1010.0) == [("ns", "c")]  # before the others, alone
    assert loop._due_jobs(snapshot, 1010.0) == [("ns", "a"), ("ns", "b"), ("ns", "c")]
    loop.wake(("ns", "b"))
    assert loop._due_jobs(snapshot, 1001.0) == [("ns", "b")]  # long before its period
    loop.wake(("ns", "gone"))  # deleted before its period: nothing to run
    assert loop._due_jobs(snapshot, 1001.0) == []
