"""End to end: a GPU job with more GPUs than one pod may hold runs as several worker pods.

``spec.resources.gpusPerPod: 1`` and 2 GPUs: the operator runs the job as two pods (the
leader ``NAME-K`` holding global rank 0, and ``NAME-K-w1``) that form one gloo world through
the job's rendezvous Service (the test bed's GPUs are advertised, not real: each GPU is one
CPU worker). The count is then moved to 1 (one pod) and back to 2 by patching the job's
bounds, each change a checkpoint and a restart of the whole group. Checked: both pods of a
group trained (the sample log has rank 1's shards), every global step ran exactly once and
every sample of the data order once, and a lost worker pod takes its group down and the job
resumes from the checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from decor.api.model import MAX_JOB_NAME_LENGTH, format_cpu
from test_failures import logged_steps, patch_job
from test_operator import (  # noqa: F401 - fixtures used by name
    CHECKPOINT_HOST_ROOT,
    CPU_MAX_CORES,
    OperatorProcess,
    crd,
    create_job,
    job_events,
    job_manifest,
    job_status,
    machine_steps,
    operator,
    read_node_file,
    report,
    steps_total,
    trainer_pods,
    wait_succeeded,
)

pytestmark = [pytest.mark.e2e]

EPOCHS = 8
BATCH = 16
# The lane's trainer cores, shared by the job's two worker pods (each pod's CPU limit).
POD_CORES = CPU_MAX_CORES / 2


def epoch_steps() -> int:
    """500 LSTM steps an epoch at a whole core per pod (about 20 ms each where the test
    ResNet steps in 0.09 s: minutes in all), as many fewer as the pods have less (a step
    takes as long at ``POD_CORES``), and fewer on a slower machine (``machine_steps``)."""
    return machine_steps(500 * min(1.0, POD_CORES))


def pods_by_name(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    return {
        p.metadata.name: p
        for p in trainer_pods(kube, namespace, name)
        if p.metadata.deletion_timestamp is None and p.status.phase in ("Pending", "Running")
    }


def gpus(pod: Any) -> str:
    return str(pod.spec.containers[0].resources.limits["nvidia.com/gpu"])


def wait_group(kube: Any, namespace: str, name: str, names: list[str]) -> dict[str, Any]:
    """Wait until exactly ``names`` are the job's live trainer pods, all Running."""

    def live() -> dict[str, Any] | None:
        pods = pods_by_name(kube, namespace, name)
        if sorted(pods) != sorted(names):
            return None
        return pods if all(p.status.phase == "Running" for p in pods.values()) else None

    return kube.wait_for(live, 180, f"trainer pods {names} running")


def wait_steps(kube: Any, namespace: str, name: str, steps: int) -> None:
    def reached() -> bool:
        return int(job_status(kube, namespace, name).get("stepsDone") or 0) >= steps

    kube.wait_for(reached, 240, f"{steps} steps done")


def set_gpus(kube: Any, namespace: str, name: str, count: int) -> None:
    bounds = {"min": count, "max": count, "initial": count}
    patch_job(kube, namespace, name, {"spec": {"resources": bounds}})


def wide_job(name: str, image: str, *extra_args: str) -> dict[str, Any]:
    """Two GPUs, at most one per pod: two worker pods (the bounds decide the count here, not
    the far deadline). The LSTM at one thread per worker, each step logged by rank 0; each
    pod's trainer limited to ``POD_CORES`` (the test bed's GPUs are advertised, not real)."""
    return job_manifest(
        name,
        image,
        epochs=EPOCHS,
        steps_per_epoch=epoch_steps(),
        duration="30m",
        resources={"mode": "gpu", "min": 2, "max": 2, "initial": 2, "gpusPerPod": 1},
        control={"policy": "decor", "periodSeconds": 2, "restartCostSeconds": 2},
        extra_args=[
            "--workload",
            "lstm",
            "--batch-size",
            str(BATCH),
            "--threads",
            "1",
            "--step-log",
            "/ckpt/steps.log",
            *extra_args,
        ],  # fmt: skip
        trainer_cpu=format_cpu(POD_CORES),
    )


def sample_log(namespace: str, job: dict[str, Any]) -> list[dict[str, Any]]:
    path = Path(CHECKPOINT_HOST_ROOT, namespace, job["metadata"]["name"], job["metadata"]["uid"])
    return [json.loads(line) for line in read_node_file(path / "samples.log").splitlines()]


def test_a_job_of_two_worker_pods_shrinks_to_one_pod_and_back(
    kube: Any,
    namespace: str,
    operator: OperatorProcess,  # noqa: F811
    trainer_image: str,
) -> None:
    name = "wide"
    manifest = wide_job(name, trainer_image, "--sample-log", "/ckpt/samples.log")
    job = create_job(kube, namespace, manifest)

    first = wait_group(kube, namespace, name, [f"{name}-0", f"{name}-0-w1"])
    assert [gpus(first[n]) for n in sorted(first)] == ["1", "1"]
    service = kube.core.read_namespaced_service(f"{name}-rendezvous", namespace)
    assert service.metadata.owner_references[0].uid == job["metadata"]["uid"]
    total = steps_total(manifest)
    wait_steps(kube, namespace, name, total // 5)

    set_gpus(kube, namespace, name, 1)  # one pod holds it: the group goes, one pod resumes
    (alone,) = wait_group(kube, namespace, name, [f"{name}-1"]).values()
    assert gpus(alone) == "1"
    wait_steps(kube, namespace, name, total // 2)

    set_gpus(kube, namespace, name, 2)  # two pods again
    wait_group(kube, namespace, name, [f"{name}-2", f"{name}-2-w1"])

    final = wait_succeeded(kube, namespace, name, timeout=400)
    report(name, final)
    assert final["restarts"] == 2, final
    assert final["podsCreated"] == 3, final  # three trainers: 2 pods, 1 pod, 2 pods
    created = [m for _, reason, m in job_events(kube, namespace, name) if reason == "PodCreated"]
    assert any(f"{name}-2, {name}-2-w1 with 1+1 nvidia.com/gpu" in m for m in created), created

    lines = sample_log(namespace, job)
    steps_by_world: dict[int, set[int]] = {}
    for line in lines:
        steps_by_world.setdefault(line["world"], set()).add(line["step"])
    # Both stages at two workers ran with rank 1 (the second pod) taking its shards.
    assert {line["rank"] for line in lines if line["world"] == 2} == {0, 1}
    alone = steps_by_world.get(1, set())
    rank1 = {line["step"] for line in lines if line["rank"] == 1}
    assert alone and min(rank1) < min(alone) and max(rank1) > max(alone)
    assert steps_by_world.keys() == {1, 2}, steps_by_world.keys()
    # Every step once: the step log (rank 0) and the sample log's steps agree.
    steps = logged_steps(namespace, job)
    assert sorted(steps) == list(range(total)), f"steps repeated or lost: {len(steps)} lines"
    per_step: dict[int, list[int]] = {}
    for line in lines:
        per_step.setdefault(line["step"], []).extend(line["indices"])
    assert sorted(per_step) == list(range(total))
    # Each step's shards make up one whole global batch, with no sample twice in a step.
    assert all(len(v) == len(set(v)) == BATCH for v in per_step.values())


def test_a_lost_worker_pod_restarts_its_group_from_the_checkpoint(
    kube: Any,
    namespace: str,
    operator: OperatorProcess,  # noqa: F811
    trainer_image: str,
) -> None:
    # A name at the CRD's limit: every name derived from it (pods, the worker, its leader
    # label, the rendezvous Service) still builds (a 63-character name once got a 422 from
    # the Service every period).
    name = "wide-lost-".ljust(MAX_JOB_NAME_LENGTH, "n")
    assert len(name) == MAX_JOB_NAME_LENGTH
    manifest = wide_job(name, trainer_image, "--checkpoint-every-s", "2")
    job = create_job(kube, namespace, manifest)
    wait_group(kube, namespace, name, [f"{name}-0", f"{name}-0-w1"])
    total = steps_total(manifest)
    wait_steps(kube, namespace, name, total // 4)
    # As a node loss or an eviction would: the worker goes without the operator asking.
    kube.core.delete_namespaced_pod(f"{name}-0-w1", namespace, grace_period_seconds=0)
    wait_group(kube, namespace, name, [f"{name}-1", f"{name}-1-w1"])
    final = wait_succeeded(kube, namespace, name, timeout=400)
    report(name, final)
    assert final["podFailures"] >= 1, final
    assert any(reason == "PodLost" for _, reason, _ in job_events(kube, namespace, name))
    steps = logged_steps(namespace, job)
    # A lost worker costs the steps since the last checkpoint: they run again, none is lost.
    assert set(steps) == set(range(total)), "steps lost across the group's restart"
    assert steps[-1] == total - 1
