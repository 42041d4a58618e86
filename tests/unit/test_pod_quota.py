"""Every container DECOR adds to a trainer pod has CPU and memory requests and limits, so that
a namespace whose ResourceQuota covers ``requests.cpu``, ``limits.cpu``, ``requests.memory``
and ``limits.memory`` accepts the pod (the API server refuses a pod with any container
missing one of them). Judged on the built pods of every mode, as an allowlist: any container
not from the user's template is DECOR's and must be bounded, whatever its name.
"""

from __future__ import annotations

from typing import Any

import pytest
from decor.api.model import parse_job
from decor.core import build, group
from decor.core.policy import VOLUME_CLAIM, VOLUME_HOST_PATH, CheckpointStorage

QUOTA_RESOURCES = ("cpu", "memory")
STORAGES = {
    "hostPath": CheckpointStorage(volume=VOLUME_HOST_PATH),
    "claim": CheckpointStorage(volume=VOLUME_CLAIM),
}
MODES: dict[str, tuple[dict[str, Any], float]] = {
    "cpu": ({"mode": "cpu", "min": "250m", "max": "2", "initial": "1"}, 1.5),
    "gpu": ({"mode": "gpu", "min": 1, "max": 2, "initial": 1}, 2.0),
    "gpu-group": ({"mode": "gpu", "min": 1, "max": 6, "initial": 1, "gpusPerPod": 2}, 5.0),
}


def job_body(resources: dict[str, Any], checkpoint: bool) -> dict[str, Any]:
    """A job whose template brings a container and an init container of its own beside the
    trainer (theirs to bound: the admin's policy judges them, not this test)."""
    spec: dict[str, Any] = {
        "duration": "600s",
        "epochs": 2,
        "stepsPerEpoch": 50,
        "resources": resources,
        "template": {
            "spec": {
                "initContainers": [{"name": "fetch-data", "image": "busybox"}],
                "containers": [
                    {"name": "trainer", "image": "localhost/decor/trainer:0.1.0"},
                    {"name": "log-shipper", "image": "busybox"},
                ],
            }
        },
    }
    if checkpoint:
        spec["checkpoint"] = {"path": "/ckpt"}
    return {
        "apiVersion": "decor.dev/v1alpha1",
        "kind": "DeadlineTrainingJob",
        "metadata": {"name": "lm", "namespace": "ml", "uid": "uid-lm", "generation": 1},
        "spec": spec,
    }


def unbounded(pod: dict[str, Any], template_names: set[str]) -> list[str]:
    """``CONTAINER.requests|limits.RESOURCE`` missing in the containers and init containers
    of ``pod`` that are not the template's."""
    missing = []
    for container in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]:
        if container["name"] in template_names:
            continue
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            values = resources.get(kind) or {}
            missing += [
                f"{container['name']}.{kind}.{name}"
                for name in QUOTA_RESOURCES
                if name not in values
            ]
    return missing


CASES = [
    (mode, checkpoint, storage)
    for mode in sorted(MODES)
    for checkpoint in (True, False)
    for storage in sorted(STORAGES)
    if checkpoint or mode == "cpu"  # a GPU job must name a checkpoint path
]


@pytest.mark.parametrize(("mode", "checkpoint", "storage"), CASES)
def test_every_container_decor_adds_has_cpu_and_memory_requests_and_limits(
    mode: str, checkpoint: bool, storage: str
) -> None:
    resources, allocation = MODES[mode]
    body = job_body(resources, checkpoint)
    spec = parse_job(body)
    pods = group.build_trainer_group(
        body, spec, allocation, "lm-0", rendezvous_ip="10.96.0.10",
        sidecar_image="localhost/decor/trainer:0.1.0", checkpoint_storage=STORAGES[storage],
    )  # fmt: skip
    assert len(pods) == (3 if mode == "gpu-group" else 1)
    template_names = {"trainer", "log-shipper", "fetch-data"}
    for pod in pods:
        added = {
            c["name"]
            for c in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]
            if c["name"] not in template_names
        }
        # what this case must have exercised: the sidecar always, the owner with hostPath
        assert build.SIDECAR_NAME in added
        owner = checkpoint and storage == "hostPath"
        assert (build.CHECKPOINT_OWNER_NAME in added) == owner
        assert unbounded(pod, template_names) == []


def test_decors_containers_have_requests_equal_to_limits() -> None:
    """Requests = limits: the planner counts them exactly, and a quota on either is met."""
    body = job_body(MODES["cpu"][0], checkpoint=True)
    (pod,) = group.build_trainer_group(
        body, parse_job(body), 1.0, "lm-0", rendezvous_ip=None,
        checkpoint_storage=STORAGES["hostPath"],
    )  # fmt: skip
    own = [c for c in pod["spec"]["initContainers"] if c["name"].startswith("decor-")]
    assert len(own) == 2
    for container in own:
        assert container["resources"]["requests"] == container["resources"]["limits"]
        assert set(container["resources"]["limits"]) == set(QUOTA_RESOURCES)
