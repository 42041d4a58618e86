"""End to end: a LimitRange that clips a job (docs/operations.md, "ResourceQuota and
LimitRange").

A namespace's LimitRange caps a container's CPU below the jobs' ``max``:

* a job whose ``min`` is above that cap is refused: no pod, its ``Admitted`` condition is
  False with reason ``LimitRangeRefused`` naming the LimitRange, and one Warning Event;
* a job whose deadline is tight enough that its law wants its whole ``max`` runs with its
  bounds clipped: its trainer is created at the cap and never holds more (no create or
  resize meets the LimitRanger's refusal), and one Normal Event ``LimitRangeClipped`` says so.
"""

from __future__ import annotations

from typing import Any

import pytest
from decor.api import vocabulary
from test_operator import (  # noqa: F401 - fixtures used by name
    CPU_MAX,
    CPU_MAX_CORES,
    CPU_MIN,
    OperatorProcess,
    condition,
    cores,
    crd,
    create_job,
    holds_for,
    job_events,
    job_manifest,
    job_status,
    operator,
    report,
    trainer_pods,
    trainer_spec_cpu,
)

pytestmark = pytest.mark.e2e

CAP_MILLICORES = min(500, round(CPU_MAX_CORES * 1000 / 2))
"""The LimitRange's most CPU per container: below CPU_MAX whatever the lanes."""
CAP = f"{CAP_MILLICORES}m"
LIMIT_RANGE = "cpu-cap"
WATCH_S = 40
"""How long the clipped job is watched running (its law wants more than the cap all along)."""


def make_limit_range(kube: Any, namespace: str) -> None:
    from kubernetes import client

    kube.core.create_namespaced_limit_range(
        namespace,
        client.V1LimitRange(
            metadata=client.V1ObjectMeta(name=LIMIT_RANGE),
            spec=client.V1LimitRangeSpec(
                limits=[client.V1LimitRangeItem(type="Container", max={"cpu": CAP})]
            ),
        ),
    )


def test_a_limit_range_that_clips_a_job(
    kube: Any,
    namespace: str,
    operator: OperatorProcess,  # noqa: F811
    trainer_image: str,
) -> None:
    make_limit_range(kube, namespace)
    title = f"LimitRange {namespace}/{LIMIT_RANGE}"

    # A min above the cap: refused (and, once the operator says so, it sees the LimitRange).
    too_big = {"mode": "cpu", "min": f"{CAP_MILLICORES + 100}m", "max": CPU_MAX}
    create_job(kube, namespace, job_manifest("lr-refused", trainer_image, duration="60s",
                                             resources=too_big))  # fmt: skip

    def refused() -> dict[str, Any] | None:
        admitted = condition(job_status(kube, namespace, "lr-refused"), "Admitted")
        return admitted if admitted.get("reason") == vocabulary.REASON_LIMIT_RANGE_REFUSED else None

    admitted = kube.wait_for(refused, 60, "the Admitted condition to say LimitRangeRefused",
                             describe=lambda: str(job_status(kube, namespace, "lr-refused")))  # fmt: skip
    assert admitted["status"] == "False", admitted
    assert title in admitted["message"] and f"max cpu {CAP}" in admitted["message"], admitted

    # Wants all of CPU_MAX (1600 steps in 45 s), gets the cap: created there, never above.
    wanting = {"mode": "cpu", "min": CPU_MIN, "max": CPU_MAX, "initial": CPU_MAX}
    create_job(kube, namespace, job_manifest("lr-clipped", trainer_image, duration="45s",
                                             epochs=16, resources=wanting))  # fmt: skip
    (pod,) = kube.wait_for(
        lambda: [
            p for p in trainer_pods(kube, namespace, "lr-clipped") if p.status.phase == "Running"
        ],  # fmt: skip
        120,
        "the clipped job's trainer to run",
    )
    assert cores(trainer_spec_cpu(pod)) == pytest.approx(cores(CAP))

    def within_the_cap() -> bool:
        pods = trainer_pods(kube, namespace, "lr-clipped")
        status = job_status(kube, namespace, "lr-clipped")
        allocation = status.get("allocation")
        return all(cores(trainer_spec_cpu(p)) <= cores(CAP) + 1e-9 for p in pods) and (
            allocation is None or cores(str(allocation)) <= cores(CAP) + 1e-9
        )

    holds_for(within_the_cap, WATCH_S, f"the clipped job holds at most {CAP}")
    status = job_status(kube, namespace, "lr-clipped")
    (now,) = trainer_pods(kube, namespace, "lr-clipped")
    report("lr-clipped", status, final_cpu=trainer_spec_cpu(now))
    assert now.metadata.uid == pod.metadata.uid  # created once, never refused or replaced
    clipped = [e for e in job_events(kube, namespace, "lr-clipped")
               if e[1] == vocabulary.EVENT_LIMIT_RANGE_CLIPPED]  # fmt: skip
    assert len(clipped) == 1, clipped
    assert clipped[0][0] == "Normal" and f"clipped to {CAP} by {title}" in clipped[0][2]
    refusals = {vocabulary.REASON_CREATE_REFUSED, vocabulary.REASON_RESIZE_REFUSED}
    assert not [e for e in job_events(kube, namespace, "lr-clipped") if e[1] in refusals]

    # The refused job: still no pod, one Warning Event for its generation.
    assert trainer_pods(kube, namespace, "lr-refused") == []
    events = [e for e in job_events(kube, namespace, "lr-refused")
              if e[1] == vocabulary.EVENT_LIMIT_RANGE_REFUSED]  # fmt: skip
    assert len(events) == 1 and events[0][0] == "Warning", events
    assert operator.metrics()["decor_operator_reconcile_errors_total"] == 0.0
