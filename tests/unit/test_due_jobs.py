"""Which jobs a period runs: those whose own period has come, and a job whose spec changed
first and alone, so that its answer does not wait behind every other due job."""

from __future__ import annotations

from typing import Any

from decor.handlers import OperatorConfig, OperatorMetrics
from decor.loop import PERIOD_JOBS, ControlLoop
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


def test_a_period_runs_at_most_its_share_of_due_jobs_the_longest_overdue_first() -> None:
    names = [f"j{i:03d}" for i in range(2 * PERIOD_JOBS + 7)]
    now = [1000.0]
    loop = _loop(names, now)
    snapshot = loop.view.snapshot()
    loop._due_jobs(snapshot, now[0])
    # j000 is due last, j<last> first: the order of their periods, not of their names.
    for i, name in enumerate(names):
        loop.controllers["ns", name].next_due_s = 2000.0 - i
    ran: list[tuple[str, str]] = []
    while batch := loop._due_jobs(snapshot, 3000.0):
        assert len(batch) <= PERIOD_JOBS
        ran += sorted(batch, key=lambda k: loop.controllers[k].next_due_s)
        for key in batch:
            loop.controllers[key].next_due_s = 3010.0
    assert [k[1] for k in ran] == names[::-1]  # every job once, the longest overdue first


def test_a_wave_of_changed_jobs_is_split_over_periods() -> None:
    names = [f"j{i:03d}" for i in range(PERIOD_JOBS + 3)]
    now = [1000.0]
    loop = _loop(names, now)
    snapshot = loop.view.snapshot()
    loop._due_jobs(snapshot, now[0])
    for key in loop.controllers:
        loop.controllers[key].next_due_s = 1010.0
    for name in names:
        loop.wake(("ns", name))
    first = loop._due_jobs(snapshot, 1001.0)
    second = loop._due_jobs(snapshot, 1001.0)
    assert len(first) == PERIOD_JOBS and len(second) == 3
    assert sorted(first + second) == [("ns", n) for n in names]
    assert loop._due_jobs(snapshot, 1001.0) == []  # none due by its period yet
