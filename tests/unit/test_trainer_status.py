"""status.trainerStatus: the Kubeflow-Trainer-TrainJob-shaped progress fields (issue 15)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from decor.api import vocabulary
from decor.core import build, control

REPO = Path(__file__).resolve().parents[2]


def status_for(steps_done: float, steps_total: float, eta_s: float | None) -> dict[str, Any]:
    observation = control.Observation(
        time_s=1000.0, steps_done=steps_done, steps_total=steps_total, allocation=1.0
    )
    return build.build_status(
        phase=vocabulary.PHASE_RUNNING,
        mode="cpu",
        start_s=900.0,
        deadline_s=1200.0,
        state=control.State(policy="decor", allocation=1.0),
        applied=1.0,
        desired=1.0,
        observation=observation,
        eta_s=eta_s,
    )


@pytest.mark.parametrize(
    ("steps_done", "steps_total", "percent"),
    [(0, 400, 0), (1, 400, 0), (199, 400, 49), (200, 400, 50), (399, 400, 99), (400, 400, 100)],
)
def test_progress_percentage_is_whole_percent_rounded_down(
    steps_done: float, steps_total: float, percent: int
) -> None:
    trainer = status_for(steps_done, steps_total, eta_s=1100.0)["trainerStatus"]
    assert trainer["progressPercentage"] == percent


def test_remaining_seconds_count_from_the_sample_and_never_go_negative() -> None:
    assert status_for(10, 100, eta_s=1123.6)["trainerStatus"]["estimatedRemainingSeconds"] == 124
    assert status_for(100, 100, eta_s=990.0)["trainerStatus"]["estimatedRemainingSeconds"] == 0


@pytest.mark.parametrize("eta_s", [None, float("inf"), float("nan")])
def test_no_estimate_removes_remaining_seconds(eta_s: float | None) -> None:
    trainer = status_for(10, 100, eta_s=eta_s)["trainerStatus"]
    assert trainer["estimatedRemainingSeconds"] is None  # a merge patch removes the key
    assert trainer["lastUpdatedTime"] == "1970-01-01T00:16:40Z"


def test_the_crd_declares_trainer_status_with_kubeflow_bounds() -> None:
    crd = yaml.safe_load((REPO / "crds" / "deadlinetrainingjobs.yaml").read_text())
    status_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    declared = status_schema["properties"]["trainerStatus"]["properties"]
    trainer = status_for(10, 100, eta_s=1100.0)["trainerStatus"]
    assert set(trainer) == set(declared)
    assert declared["progressPercentage"]["minimum"] == 0
    assert declared["progressPercentage"]["maximum"] == build.PERCENT
    assert declared["estimatedRemainingSeconds"]["minimum"] == 0
