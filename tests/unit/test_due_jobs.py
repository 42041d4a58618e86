"""Which jobs a period runs: those whose own period has come, and a job whose spec changed
first and alone, so that its answer does not wait behind every other due job."""

from __future__ import annotations

from typing import Any

import pytest
from decor.core.views import (
    EVERY_POD,
    LIMIT_RANGES,
    NODES,
    QUOTAS,
    ClusterView,
    Key,
    Snapshot,
    pods_in,
)
from decor.service.config import OperatorConfig
from decor.service.job import STATUS_WRITES_PER_S
from decor.service.loop import (
    IDLE_PERIOD_S,
    LAGGING_PERIOD_JOBS,
    LAGGING_S,
    PERIOD_JOBS,
    ControlLoop,
    ahead_s,
)
from decor.service.operator_metrics import OperatorMetrics
from prometheus_client import CollectorRegistry


def _body(name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}"}, "spec": {}}


def _loop(names: list[str], now: list[float]) -> ControlLoop:
    view = ClusterView()
    for name in names:
        view.put_job(_body(name))
    view.replace_pods([])  # the pod watch's first LIST: no pod yet
    return ControlLoop(
        view,
        kube=None,  # type: ignore[arg-type]  # choosing due jobs makes no call
        config=OperatorConfig(),
        operator_metrics=OperatorMetrics(CollectorRegistry()),
        clock=lambda: now[0],
    )


def _due(loop: ControlLoop, snapshot: Snapshot, now: float) -> list[Key]:
    return loop._due_jobs(snapshot, now, loop._take_woken())


def test_new_jobs_are_due_then_each_when_its_period_has_come() -> None:
    now = [1000.0]
    loop = _loop(["a", "b", "c"], now)
    snapshot = loop.view.snapshot()
    assert _due(loop, snapshot, now[0]) == [("ns", "a"), ("ns", "b"), ("ns", "c")]
    loop.controllers["ns", "a"].next_due_s = 1010.0
    loop.controllers["ns", "b"].next_due_s = 1005.0
    loop.controllers["ns", "c"].next_due_s = 1020.0
    assert _due(loop, snapshot, 1004.0) == []
    assert _due(loop, snapshot, 1010.0) == [("ns", "a"), ("ns", "b")]


def test_a_job_due_soon_runs_ahead_with_a_period_that_runs_a_due_job_and_never_alone() -> None:
    now = [1000.0]
    loop = _loop(["a", "b", "c"], now)
    snapshot = loop.view.snapshot()
    _due(loop, snapshot, now[0])
    for key, due_s in ((("ns", "a"), 1010.0), (("ns", "b"), 1010.9), (("ns", "c"), 1011.1)):
        loop.controllers[key].period_s = 10.0  # runs up to ahead_s(10) = 1 s ahead
        loop.controllers[key].next_due_s = due_s
    assert ahead_s(10.0) == 1.0 and ahead_s(2.0) == pytest.approx(0.2)
    assert _due(loop, snapshot, 1009.5) == []  # b and c are close, but nothing is due yet
    assert _due(loop, snapshot, 1010.0) == [("ns", "a"), ("ns", "b")]  # c is 1.1 s off
    assert loop.metrics.period_lateness._sum.get() == 0.0  # b, run ahead, was not late


def test_jobs_due_at_scattered_times_come_to_share_few_periods() -> None:
    """Jobs whose periods began at scattered times (created one by one, a patched job run
    alone) each made a period of its own, for ever: 300 jobs at a 10 s period made about 30
    periods a second, each paying the read and the plan over every job for one or two. Run
    ahead of their period's end, they gather into groups at least a second apart."""
    names = [f"j{i:03d}" for i in range(300)]
    now = [1000.0]
    loop = _loop(names, now)
    snapshot = loop.view.snapshot()
    _due(loop, snapshot, now[0])
    for i, name in enumerate(names):
        controller = loop.controllers["ns", name]
        controller.period_s = 10.0
        controller.next_due_s = 1000.0 + 10.0 * i / len(names)  # one every 33 ms
    runs: dict[Key, list[float]] = {key: [] for key in loop.controllers}
    periods: list[float] = []
    t = 1000.0
    while t < 1100.0:
        batch = _due(loop, snapshot, t)
        assert batch, "the loop woke with no job due"
        periods.append(t)
        for key in batch:
            runs[key].append(t)
            loop.controllers[key].next_due_s = t + 10.0  # as the period's prepare sets it
        t = min(c.next_due_s for c in loop.controllers.values())  # as run_period returns
    last_cycle = [p for p in periods if p >= 1090.0]
    assert len(last_cycle) <= 10  # at least a second apart (300 before)
    assert all(b - a >= 1.0 for a, b in zip(last_cycle, last_cycle[1:], strict=False))
    for times in runs.values():  # never late, never more than a second early
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert all(9.0 <= gap <= 10.0 for gap in gaps)


def test_a_job_whose_spec_changed_runs_first_and_alone() -> None:
    now = [1000.0]
    loop = _loop(["a", "b", "c"], now)
    snapshot = loop.view.snapshot()
    _due(loop, snapshot, now[0])
    for key in loop.controllers:
        loop.controllers[key].next_due_s = 1010.0  # all three due at 1010
    loop.wake(("ns", "c"))
    assert _due(loop, snapshot, 1010.0) == [("ns", "c")]  # before the others, alone
    assert _due(loop, snapshot, 1010.0) == [("ns", "a"), ("ns", "b"), ("ns", "c")]
    loop.wake(("ns", "b"))
    assert _due(loop, snapshot, 1001.0) == [("ns", "b")]  # long before its period
    loop.wake(("ns", "gone"))  # deleted before its period: nothing to run
    assert _due(loop, snapshot, 1001.0) == []


def test_a_period_runs_at_most_its_share_of_due_jobs_the_longest_overdue_first() -> None:
    names = [f"j{i:03d}" for i in range(2 * PERIOD_JOBS + 7)]
    now = [1000.0]
    loop = _loop(names, now)
    snapshot = loop.view.snapshot()
    _due(loop, snapshot, now[0])
    # j000 is due last, j<last> first: the order of their periods, not of their names; the
    # longest overdue is less than LAGGING_S late (the loop keeps up).
    for i, name in enumerate(names):
        loop.controllers["ns", name].next_due_s = 3000.0 - i * (LAGGING_S / 2 / len(names))
    ran: list[tuple[str, str]] = []
    while batch := _due(loop, snapshot, 3000.0):
        assert len(batch) <= PERIOD_JOBS
        ran += sorted(batch, key=lambda k: loop.controllers[k].next_due_s)
        for key in batch:
            loop.controllers[key].next_due_s = 3010.0
    assert [k[1] for k in ran] == names[::-1]  # every job once, the longest overdue first


def test_a_loop_that_has_fallen_behind_runs_more_jobs_a_period_until_it_catches_up() -> None:
    names = [f"j{i:03d}" for i in range(3 * LAGGING_PERIOD_JOBS)]
    now = [1000.0]
    loop = _loop(names, now)
    snapshot = loop.view.snapshot()
    _due(loop, snapshot, now[0])
    # Due over the last 3 s, the longest overdue first: the first periods find it behind.
    for i, name in enumerate(names):
        loop.controllers["ns", name].next_due_s = 3000.0 - 3.0 * i / len(names)
    sizes = []
    while batch := _due(loop, snapshot, 3000.0):
        sizes.append(len(batch))
        for key in batch:
            loop.controllers[key].next_due_s = 3010.0
    # Behind while its longest overdue is at least LAGGING_S late (the first two thirds of
    # the jobs), then the jobs due within the last second, one period's share at a time.
    assert sizes == [LAGGING_PERIOD_JOBS] * 2 + [PERIOD_JOBS] * (LAGGING_PERIOD_JOBS // PERIOD_JOBS)


def test_a_wave_of_changed_jobs_is_split_over_periods() -> None:
    names = [f"j{i:03d}" for i in range(PERIOD_JOBS + 3)]
    now = [1000.0]
    loop = _loop(names, now)
    snapshot = loop.view.snapshot()
    _due(loop, snapshot, now[0])
    for key in loop.controllers:
        loop.controllers[key].next_due_s = 1010.0
    for name in names:
        loop.wake(("ns", name))
    first = _due(loop, snapshot, 1001.0)
    second = _due(loop, snapshot, 1001.0)
    assert len(first) == PERIOD_JOBS and len(second) == 3
    assert sorted(first + second) == [("ns", n) for n in names]
    assert _due(loop, snapshot, 1001.0) == []  # none due by its period yet


def test_a_wake_that_comes_after_the_snapshot_waits_for_the_next_period() -> None:
    """The spec change came into the view after this period's snapshot: this period must not
    use up its wake on the old spec (the job would then wait for its own period)."""
    now = [1000.0]
    loop = _loop(["a", "b"], now)
    loop.run_period()  # both new: due, and now not again before their periods
    taken: list[set[Key]] = []
    real_due, real_snapshot = loop._due_jobs, loop.view.snapshot

    def snapshot_then_patch() -> Snapshot:
        snapshot = real_snapshot()
        loop.view.put_job({**_body("a"), "spec": {"duration": "60s"}})  # as dtj_event does
        loop.wake(("ns", "a"))
        return snapshot

    def due(snapshot: Snapshot, at: float, woken: set[Key]) -> list[Key]:
        taken.append(set(woken))
        return real_due(snapshot, at, woken)

    loop.view.snapshot = snapshot_then_patch  # type: ignore[method-assign]
    loop._due_jobs = due  # type: ignore[method-assign]
    loop.run_period()
    assert taken == [set()]
    loop.view.snapshot = real_snapshot  # type: ignore[method-assign]
    assert _due(loop, loop.view.snapshot(), now[0] + 0.1) == [("ns", "a")]


def _loop_without_api(view: ClusterView, config: OperatorConfig) -> ControlLoop:
    """A loop at t = 1000 s whose test runs no period that calls the API server."""
    return ControlLoop(
        view,
        kube=None,  # type: ignore[arg-type]
        config=config,
        operator_metrics=OperatorMetrics(CollectorRegistry()),
        clock=lambda: 1000.0,
    )


@pytest.mark.parametrize("watch_nodes", [True, False], ids=["cluster-wide", "trainer-pods"])
def test_no_period_runs_before_the_pod_watch_has_listed_every_pod(watch_nodes: bool) -> None:
    """A job's trainer may exist unseen until the pod LIST has answered (a watch the API
    refuses never does), with the cluster-wide watches and with the namespaced watch of
    trainer pods alike (an operator just restarted saw its job before its pod, took the pod
    for lost and made a second): no period runs, so none creates a pod."""
    view = ClusterView()
    view.put_job(_body("a"))
    loop = _loop_without_api(view, OperatorConfig(watch_nodes=watch_nodes))
    assert loop.run_period() == IDLE_PERIOD_S
    assert loop.run_period() == IDLE_PERIOD_S
    assert not loop.controllers
    view.replace_pods([])
    loop.run_period()
    assert set(loop.controllers) == {("ns", "a")}


def test_with_the_capacity_view_no_period_runs_before_nodes_and_quotas_are_listed_too() -> None:
    """A plan made before the nodes, ResourceQuotas and LimitRanges are known would give each
    job what its law asks (no arbitration) and pass quotas by."""
    view = ClusterView()
    view.expect_lists((EVERY_POD, NODES, QUOTAS, LIMIT_RANGES))
    view.put_job(_body("a"))
    loop = _loop_without_api(view, OperatorConfig())
    for replace in (view.replace_pods, view.replace_nodes, view.replace_quotas):
        replace([])
        assert loop.run_period() == IDLE_PERIOD_S
        assert not loop.controllers
    view.replace_limit_ranges([])
    loop.run_period()
    assert set(loop.controllers) == {("ns", "a")}


def test_a_namespaced_operator_runs_a_namespace_s_jobs_once_its_pods_are_listed() -> None:
    """Each namespace served has its own pod watch: its jobs wait for its first list, and a
    namespace whose pods cannot be listed (no Role there yet) holds up no other."""
    view = ClusterView()
    view.expect_lists([pods_in("ns"), pods_in("other")])
    view.put_job(_body("a"))
    view.put_job({**_body("b"), "metadata": {"namespace": "other", "name": "b", "uid": "uid-b"}})
    loop = _loop_without_api(view, OperatorConfig(watch_nodes=False))
    snapshot = view.snapshot()
    assert loop._due_jobs(snapshot, 1000.0, set()) == []
    assert not loop.controllers
    view.replace_pods([], namespace="ns")
    assert loop._due_jobs(snapshot, 1000.0, set()) == [("ns", "a")]
    view.replace_pods([], namespace="other")
    assert loop._due_jobs(snapshot, 1000.0, set()) == [("ns", "a"), ("other", "b")]


def test_each_committed_job_gets_the_fleets_share_of_routine_status_writes() -> None:
    names = [f"j{i:04d}" for i in range(1000)]
    now = [1000.0]
    loop = _loop(names, now)
    snapshot = loop.view.snapshot()
    due = _due(loop, snapshot, now[0])
    loop.controllers["ns", names[-1]].done = True  # a finished job writes nothing routine
    committed: list[Key] = []
    loop._commit = lambda key, *_: committed.append(key)  # type: ignore[method-assign]
    loop._commit_all(due, None, None, now[0])  # type: ignore[arg-type]
    assert committed == due
    assert {loop.controllers[k].status_spread_s for k in due} == {999 / STATUS_WRITES_PER_S}
