"""End to end: a namespace's ResourceQuota bounds the planner.

The namespace's quota (``limits.cpu``) holds one job's pod at its max but not two: of two
short CPU jobs, the earlier-deadline one is admitted and meets its deadline; the other is
Queued, its condition naming the quota, and it is admitted when the first has finished.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import pytest
from test_operator import (  # noqa: F401, F811 - fixtures used by name
    CPU_MAX,
    CPU_MAX_CORES,
    CPU_MIN,
    DEVIATION_BOUND_PERCENT,
    OperatorProcess,
    condition,
    crd,
    create_job,
    job_manifest,
    job_status,
    operator,
    report,
    trainer_pods,
    wait_succeeded,
)

pytestmark = pytest.mark.e2e

QUOTA = "team"
# The first job's pod at its max (and the metrics sidecar's 50m) fits; a second pod at the
# max does not beside the first's pod at its min (100m + 50m), however far it shrinks.
QUOTA_CPU = f"{round(CPU_MAX_CORES * 1000) + 100}m"


def _resource_quota(kube: Any, namespace: str) -> None:
    from kubernetes import client

    kube.core.create_namespaced_resource_quota(
        namespace,
        client.V1ResourceQuota(
            metadata=client.V1ObjectMeta(name=QUOTA),
            spec=client.V1ResourceQuotaSpec(hard={"limits.cpu": QUOTA_CPU}),
        ),
    )
    kube.wait_for(
        lambda: kube.core.read_namespaced_resource_quota(QUOTA, namespace).status.hard or {},
        30,
        "the quota controller to count the quota",
    )


def _job(name: str, duration: str, image: str) -> dict[str, Any]:
    """A short CPU job (200 steps, started at its max)."""
    resources = {"mode": "cpu", "min": CPU_MIN, "max": CPU_MAX, "initial": CPU_MAX}
    return job_manifest(
        name, image, epochs=2, duration=duration, resources=resources, checkpoint=False
    )


def _created_s(pod: Any) -> float:
    return float(pod.metadata.creation_timestamp.timestamp())


def test_a_quota_queues_the_second_job_until_the_first_has_finished(
    kube: Any,
    namespace: str,
    operator: OperatorProcess,  # noqa: F811
    trainer_image: str,
) -> None:
    started = time.monotonic()
    _resource_quota(kube, namespace)
    create_job(kube, namespace, _job("first", "90s", trainer_image))
    create_job(kube, namespace, _job("second", "600s", trainer_image))

    def queued() -> dict[str, Any] | None:
        status = job_status(kube, namespace, "second")
        return status if status.get("admission") == "Queued" else None

    status = kube.wait_for(queued, 60, "the second job to be Queued")
    admitted = condition(status, "Admitted")
    assert admitted["status"] == "False" and admitted["reason"] == "Queued", admitted
    assert f"ResourceQuota {namespace}/{QUOTA} leaves" in admitted["message"], admitted
    assert "of limits.cpu" in admitted["message"], admitted
    print(f"\n[e2e quota] second job: {admitted['message']}")

    done = wait_succeeded(kube, namespace, "first", timeout=180)
    report("quota first", done)
    assert abs(done["outcome"]["deviationPercent"]) <= DEVIATION_BOUND_PERCENT, done["outcome"]
    # The second job waited the whole time: no pod, Queued, while the first ran.
    finished_s = datetime.fromisoformat(done["outcome"]["finishedAt"]).timestamp()
    assert all(_created_s(p) >= finished_s - 1 for p in trainer_pods(kube, namespace, "second"))

    def admitted_with_pod() -> list[Any] | None:
        status = job_status(kube, namespace, "second")
        pods = trainer_pods(kube, namespace, "second")
        return pods if status.get("admission") == "Admitted" and pods else None

    describe = lambda: json.dumps(job_status(kube, namespace, "second"), indent=1)[:3000]  # noqa: E731
    (pod,) = kube.wait_for(admitted_with_pod, 60, "the second job admitted", describe=describe)
    # Created once the first had finished (its pod's creation is stamped in whole seconds).
    assert _created_s(pod) >= finished_s - 1, (pod.metadata.creation_timestamp, finished_s)
    print(f"[e2e quota] second job admitted {_created_s(pod) - finished_s:.0f} s after the first "
          f"finished; {time.monotonic() - started:.0f} s in all")  # fmt: skip
