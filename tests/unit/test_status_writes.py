"""Status is written when something a user acts on changes, progress at most every few
periods, not every period."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from decor.core.build import shown_progress, visible_status
from decor.service import job
from decor.service.config import OperatorConfig
from decor.service.operator_metrics import OperatorMetrics
from prometheus_client import CollectorRegistry


def _status(**changes: Any) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": "Running",
        "allocation": "750m",
        "desiredAllocation": "750m",
        "progress": 0.4213,
        "stepsDone": 421,
        "eta": "2026-11-23T10:00:41Z",
        "controller": {"allocation": 0.75, "last_steps": 421},
        "conditions": [
            {"type": "OnTrack", "status": "True", "reason": "PredictedOnTime", "message": "m"}
        ],
    }
    status.update(changes)
    return status


def test_what_changes_every_period_is_not_acted_on() -> None:
    base = visible_status(_status())
    assert visible_status(_status(stepsDone=425, progress=0.4951)) == base
    assert visible_status(_status(controller={"allocation": 0.75, "last_steps": 425})) == base
    assert visible_status(_status(eta="2026-11-23T10:09:47Z")) == base
    moved = [{"type": "OnTrack", "status": "True", "reason": "PredictedOnTime", "message": "n"}]
    assert visible_status(_status(conditions=moved)) == base  # numbers in a message move


def test_what_a_user_acts_on_is_visible() -> None:
    base = visible_status(_status())
    for changed in (
        _status(allocation="800m"),
        _status(phase="Succeeded"),
        _status(admission="Queued"),
        _status(
            conditions=[
                {"type": "OnTrack", "status": "False", "reason": "NeedsNearMax", "message": "m"}
            ]
        ),
    ):
        assert visible_status(changed) != base, changed


def test_progress_is_shown_to_a_whole_percent_and_eta_to_ten_seconds() -> None:
    base = shown_progress(_status())
    assert shown_progress(_status(progress=0.4251, stepsDone=425)) == base
    assert shown_progress(_status(eta="2026-11-23T10:00:47Z")) == base
    assert shown_progress(_status(progress=0.4301)) != base
    assert shown_progress(_status(eta="2026-11-23T10:00:51Z")) != base


class _Kube:
    def __init__(self) -> None:
        self.writes: list[dict[str, Any]] = []

    def patch_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any], uid: str | None = None
    ) -> bool:
        self.writes.append(dict(status))
        return True


def _controller(period_s: float) -> tuple[job.JobController, _Kube, list[float]]:
    kube = _Kube()
    now = [1000.0]
    controller = job.JobController(
        "ns",
        "train",
        "uid-1",
        kube=kube,  # type: ignore[arg-type]
        config=OperatorConfig(),
        operator_metrics=OperatorMetrics(CollectorRegistry()),
        clock=lambda: now[0],
    )
    controller.period_s = period_s
    return controller, kube, now


def _run_periods(
    controller: job.JobController, now: list[float], periods: int, period_s: float, **change: Any
) -> None:
    """Periods in which progress gains a whole percent (and the ETA moves) every period."""
    for _ in range(periods):
        now[0] += period_s
        progress = controller.status["progress"] + 0.0125
        controller.status = _status(progress=progress, **change)
        minute, second = divmod(int(now[0]) % 3600, 60)
        controller.status["eta"] = f"2026-11-23T10:{minute:02d}:{second:02d}Z"
        controller._write()


def test_progress_alone_is_written_once_per_three_periods() -> None:
    period_s = 10.0
    controller, kube, now = _controller(period_s)
    controller.status = _status(progress=0.10)
    assert controller._write()
    _run_periods(controller, now, 30, period_s)
    # 30 periods of 10 s whose progress moves every period: one write per 3 periods.
    assert len(kube.writes) == 1 + 30 // int(job.PROGRESS_WRITE_PERIODS)


def test_what_a_user_acts_on_is_written_the_period_it_changes() -> None:
    period_s = 10.0
    controller, kube, now = _controller(period_s)
    controller.status = _status(progress=0.10)
    assert controller._write()
    _run_periods(controller, now, 1, period_s)  # progress moved: not yet due
    assert len(kube.writes) == 1
    _run_periods(controller, now, 1, period_s, allocation="1500m")
    assert len(kube.writes) == 2 and kube.writes[-1]["allocation"] == "1500m"


def test_state_alone_is_written_with_the_heartbeat() -> None:
    controller, kube, now = _controller(1.0)
    controller.status = _status()
    assert controller._write()
    for _ in range(int(job.STATUS_HEARTBEAT_S) + 1):
        now[0] += 1.0
        controller.status = _status(controller={"allocation": 0.75, "last_steps": now[0]})
        controller._write()
    assert len(kube.writes) == 2  # the first, and one heartbeat


def test_a_large_fleet_spreads_its_routine_writes_but_not_what_a_user_acts_on() -> None:
    """At 1,000 jobs each job's progress and heartbeat wait jobs / STATUS_WRITES_PER_S (50 s)
    instead of 3 periods (30 s): the fleet's routine writes stay near the budget."""
    period_s, jobs = 10.0, 1000
    controller, kube, now = _controller(period_s)
    controller.status_spread_s = jobs / job.STATUS_WRITES_PER_S
    controller.status = _status(progress=0.10)
    assert controller._write()
    _run_periods(controller, now, 30, period_s)  # 300 s of moving progress
    spread_periods = int(controller.status_spread_s // period_s)
    assert len(kube.writes) == 1 + 30 // spread_periods
    assert 30 / (len(kube.writes) - 1) * period_s * job.STATUS_WRITES_PER_S >= jobs
    _run_periods(controller, now, 1, period_s, allocation="1500m")  # acted on: at once
    assert kube.writes[-1]["allocation"] == "1500m"
    # the heartbeat is spread too
    controller, kube, now = _controller(1.0)
    controller.status_spread_s = 45.0
    controller.status = _status()
    assert controller._write()
    for _ in range(44):
        now[0] += 1.0
        controller.status = _status(controller={"allocation": 0.75, "last_steps": now[0]})
        controller._write()
    assert len(kube.writes) == 1
    now[0] += 1.0
    controller.status = _status(controller={"allocation": 0.75, "last_steps": now[0]})
    controller._write()
    assert len(kube.writes) == 2


def test_a_small_fleet_writes_as_before() -> None:
    """Below STATUS_HEARTBEAT_S x STATUS_WRITES_PER_S jobs at a 10 s period nothing changes."""
    period_s = 10.0
    controller, kube, now = _controller(period_s)
    controller.status_spread_s = 600 / job.STATUS_WRITES_PER_S
    controller.status = _status(progress=0.10)
    assert controller._write()
    _run_periods(controller, now, 30, period_s)
    assert len(kube.writes) == 1 + 30 // int(job.PROGRESS_WRITE_PERIODS)
