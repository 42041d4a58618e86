"""Status is written when something a user sees changes, not every period."""

from __future__ import annotations

from typing import Any

from decor.build import visible_status


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


def test_what_changes_every_period_is_not_visible() -> None:
    base = visible_status(_status())
    assert visible_status(_status(stepsDone=425, progress=0.4251)) == base
    assert visible_status(_status(controller={"allocation": 0.75, "last_steps": 425})) == base
    assert visible_status(_status(eta="2026-11-23T10:00:47Z")) == base  # same ten seconds
    moved = [{"type": "OnTrack", "status": "True", "reason": "PredictedOnTime", "message": "n"}]
    assert visible_status(_status(conditions=moved)) == base  # numbers in a message move


def test_what_a_user_sees_is_visible() -> None:
    base = visible_status(_status())
    for changed in (
        _status(progress=0.4301),  # a whole percent more
        _status(allocation="800m"),
        _status(phase="Succeeded"),
        _status(eta="2026-11-23T10:00:51Z"),
        _status(admission="Queued"),
        _status(
            conditions=[
                {"type": "OnTrack", "status": "False", "reason": "NeedsNearMax", "message": "m"}
            ]
        ),
    ):
        assert visible_status(changed) != base, changed
