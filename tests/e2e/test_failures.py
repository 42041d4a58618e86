"""End to end: the ways a trainer can end or stop that must not pass for success (issue 12).

* a trainer that exits 0 at a third of its steps is not Succeeded: the operator sees steps
  left (its termination message ``steps=DONE/PLANNED``), posts ``PodLost`` (ExitedEarly)
  and a new pod resumes from the checkpoint; the job then completes every step exactly once;
* a trainer that hangs mid-run (runs, completes no step) is reported ``Stalled`` with a
  Warning Event instead of staying OnTrack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_operator import (  # noqa: F401 - fixtures used by name
    CHECKPOINT_HOST_ROOT,
    OperatorProcess,
    condition,
    crd,
    create_job,
    job_events,
    job_manifest,
    job_status,
    operator,
    read_node_file,
    report,
    wait_succeeded,
)

pytestmark = pytest.mark.e2e


def test_a_trainer_that_exits_0_early_is_resumed_not_succeeded(
    kube: Any,
    namespace: str,
    operator: OperatorProcess,  # noqa: F811
    trainer_image: str,
) -> None:
    name = "early"
    manifest = job_manifest(
        name,
        trainer_image,
        epochs=3,
        steps_per_epoch=100,
        duration="150s",
        extra_args=["--exit-at-step", "100", "--step-log", "/ckpt/steps.log"],
    )
    job = create_job(kube, namespace, manifest)
    final = wait_succeeded(kube, namespace, name, timeout=360)
    report(name, final)
    events = job_events(kube, namespace, name)
    lost = [m for t, r, m in events if (t, r) == ("Warning", "PodLost")]
    assert lost and "ExitedEarly" in lost[0] and "step 100 of 300" in lost[0], events
    assert final["podsCreated"] == 2 and final["podFailures"] == 1, final
    assert final["stepsDone"] == final["stepsTotal"] == 300, final
    step_log = Path(CHECKPOINT_HOST_ROOT, namespace, name, job["metadata"]["uid"], "steps.log")
    steps = [int(line) for line in read_node_file(step_log).split()]
    assert sorted(steps) == list(range(300)), "steps repeated or lost across the early exit"


def test_a_hanging_trainer_is_reported_stalled(
    kube: Any,
    namespace: str,
    operator: OperatorProcess,  # noqa: F811
    trainer_image: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    operator.stop()
    monkeypatch.setenv("DECOR_STALL_TIMEOUT_SECONDS", "15")
    operator.process = None
    operator.start()
    name = "hang"
    create_job(
        kube,
        namespace,
        job_manifest(
            name,
            trainer_image,
            epochs=3,
            steps_per_epoch=100,
            duration="300s",
            extra_args=["--hang-at-step", "40"],
        ),
    )

    def stalled() -> dict[str, Any] | None:
        found = condition(job_status(kube, namespace, name), "Stalled")
        return found if found.get("status") == "True" else None

    found = kube.wait_for(stalled, 180, "the Stalled condition")
    status = job_status(kube, namespace, name)
    report(name, status, stalled=found.get("message"))
    assert found["reason"] == "NoNewSteps", found
    assert status["stepsDone"] == 40, status
    assert ("Warning", "Stalled") in {(t, r) for t, r, _m in job_events(kube, namespace, name)}
