"""End to end: jobs in a namespace with a ResourceQuota (docs/operations.md, "ResourceQuota
and LimitRange").

* a quota that covers ``requests.cpu``, ``limits.cpu``, ``requests.memory`` and
  ``limits.memory`` accepts a trainer pod only if every container has both requests and
  limits of CPU and memory: DECOR's own containers have them, the template's trainer names
  its memory, and the job starts and meets its deadline;
* a quota whose ``limits.cpu`` holds the job's start but not its growth: the API server
  refuses the in-place resize (403 exceeded quota); the job keeps running at what it holds,
  says so in its ``Admitted`` condition (reason ``ResizeRefused``) with exactly one Warning
  Event, and tries again only after a backoff (no error escapes the operator's period).
"""

from __future__ import annotations

from typing import Any

import pytest
from decor.api import vocabulary
from decor.core import build
from test_operator import (  # noqa: F401 - fixtures used by name
    CPU_MAX,
    CPU_MIN,
    DEVIATION_BOUND_PERCENT,
    OperatorProcess,
    condition,
    cores,
    crd,
    create_job,
    holds_for,
    job_events,
    job_manifest,
    job_status,
    lane_steps,
    operator,
    report,
    trainer_pods,
    trainer_restarts,
    trainer_spec_cpu,
    wait_succeeded,
)

pytestmark = pytest.mark.e2e

COMPUTE = ("requests.cpu", "limits.cpu", "requests.memory", "limits.memory")
"""What the quotas here cover: a pod is refused unless every container sets all four."""
START_CPU = "200m"
"""The trainer's first allocation in the growth test: the quota holds this and no more."""
SIDECAR_CPU = build.SIDECAR_RESOURCES["limits"]["cpu"]


def make_quota(kube: Any, namespace: str, hard: dict[str, str]) -> None:
    from kubernetes import client

    kube.core.create_namespaced_resource_quota(
        namespace,
        client.V1ResourceQuota(
            metadata=client.V1ObjectMeta(name="compute"),
            spec=client.V1ResourceQuotaSpec(hard=hard),
        ),
    )
    # The quota controller fills status.hard; until then the quota admits nothing.
    kube.wait_for(
        lambda: kube.core.read_namespaced_resource_quota("compute", namespace).status.hard,
        30,
        "the quota's status",
    )


def quota_used(kube: Any, namespace: str) -> dict[str, str]:
    return dict(kube.core.read_namespaced_resource_quota("compute", namespace).status.used or {})


def every_container_bounded(pod: Any) -> list[str]:
    """Containers (init containers included) of ``pod`` without CPU and memory requests and
    limits: what a quota of :data:`COMPUTE` refuses."""
    missing = []
    for container in [*(pod.spec.init_containers or []), *pod.spec.containers]:
        resources = container.resources
        for kind in ("requests", "limits"):
            values = getattr(resources, kind) or {}
            missing += [
                f"{container.name}.{kind}.{r}" for r in ("cpu", "memory") if r not in values
            ]
    return missing


def test_a_job_in_a_namespace_with_compute_quota_starts_and_meets_its_deadline(
    kube: Any,
    namespace: str,
    operator: OperatorProcess,  # noqa: F811
    trainer_image: str,
) -> None:
    make_quota(
        kube,
        namespace,
        {quota: "4" if quota.endswith(".cpu") else "8Gi" for quota in COMPUTE},
    )
    create_job(kube, namespace, job_manifest("quota-ok", trainer_image, duration="90s"))
    status = wait_succeeded(kube, namespace, "quota-ok", timeout=240)
    (pod,) = trainer_pods(kube, namespace, "quota-ok")
    report("quota-ok", status, final_cpu=trainer_spec_cpu(pod))
    assert every_container_bounded(pod) == []
    assert abs(status["outcome"]["deviationPercent"]) <= DEVIATION_BOUND_PERCENT, status["outcome"]
    assert status["podsCreated"] == 1
    refused = {vocabulary.REASON_CREATE_REFUSED, vocabulary.REASON_RESIZE_REFUSED}
    assert not [e for e in job_events(kube, namespace, "quota-ok") if e[1] in refused]
    assert operator.metrics()["decor_operator_reconcile_errors_total"] == 0.0


def test_a_resize_the_quota_refuses_is_a_condition_and_one_event(
    kube: Any,
    namespace: str,
    operator: OperatorProcess,  # noqa: F811
    trainer_image: str,
) -> None:
    # An operator that watches no nodes (a namespaced install) does not plan within quotas
    # (with the capacity view it never asks beyond them: test_quota_planner.py); its resizes
    # meet the API server's quota admission instead.
    operator.stop()
    operator.env["DECOR_WATCH_NODES"] = "false"
    operator.start()
    # The pod's limits.cpu at the start: the trainer's START_CPU and the metrics sidecar's;
    # the quota holds exactly that, so any grow of the trainer is refused.
    start_cores = cores(START_CPU) + cores(SIDECAR_CPU)
    make_quota(
        kube,
        namespace,
        {
            "requests.cpu": f"{round(start_cores * 1000)}m",
            "limits.cpu": f"{round(start_cores * 1000)}m",
            "requests.memory": "8Gi",
            "limits.memory": "8Gi",
        },
    )
    # 800 steps in 120 s need several times START_CPU: the law asks to grow at once, and the
    # checks below end long before the deadline (once it has passed, the job runs on as the
    # lost-deadline rule says, not at what it holds).
    resources = {"mode": "cpu", "min": CPU_MIN, "max": CPU_MAX, "initial": START_CPU}
    create_job(kube, namespace, job_manifest("quota-grow", trainer_image, duration="120s",
                                             steps_per_epoch=lane_steps(200),
                                             resources=resources))  # fmt: skip

    def refused() -> dict[str, Any] | None:
        admitted = condition(job_status(kube, namespace, "quota-grow"), "Admitted")
        return admitted if admitted.get("reason") == vocabulary.REASON_RESIZE_REFUSED else None

    admitted = kube.wait_for(refused, 120, "the Admitted condition to say ResizeRefused",
                             describe=lambda: str(job_status(kube, namespace, "quota-grow")))  # fmt: skip
    assert admitted["status"] == "True", admitted  # admitted, and running at what it holds
    assert "exceeded quota" in admitted["message"], admitted
    # Retries back off (10 s, then 20 s...) and a refusal that goes on is announced once.
    (pod,) = trainer_pods(kube, namespace, "quota-grow")
    holds_for(
        lambda: (
            condition(job_status(kube, namespace, "quota-grow"), "Admitted").get("reason")
            == vocabulary.REASON_RESIZE_REFUSED
        ),
        35,
        "the refusal stays on the condition while the quota does not change",
    )
    events = [e for e in job_events(kube, namespace, "quota-grow")
              if e[1] == vocabulary.REASON_RESIZE_REFUSED]  # fmt: skip
    assert len(events) == 1, events
    assert events[0][0] == "Warning"
    (now,) = trainer_pods(kube, namespace, "quota-grow")
    report("quota-grow", job_status(kube, namespace, "quota-grow"), final_cpu=trainer_spec_cpu(now))
    assert now.metadata.uid == pod.metadata.uid and now.status.phase == "Running"
    assert trainer_restarts(now) == 0
    assert cores(trainer_spec_cpu(now)) == pytest.approx(cores(START_CPU))
    assert cores(quota_used(kube, namespace)["limits.cpu"]) <= start_cores + 1e-9
    metrics = operator.metrics()
    assert metrics["decor_operator_reconcile_errors_total"] == 0.0
    assert metrics.get('decor_operator_actuations_total{kind="resize"}', 0.0) == 0.0
