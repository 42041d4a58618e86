"""GPU mode: the trainer pod tells the trainer how many workers to run (DECOR_WORKERS)."""

from __future__ import annotations

from typing import Any

import pytest
from decor.api.model import parse_job
from decor.core import build
from decor_trainer import contract


def job_body(resources: dict[str, Any], env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    trainer: dict[str, Any] = {"name": "trainer", "image": "localhost/decor/trainer:0.1.0"}
    if env is not None:
        trainer["env"] = env
    return {
        "apiVersion": "decor.dev/v1alpha1",
        "kind": "DeadlineTrainingJob",
        "metadata": {"name": "lm", "namespace": "ml", "uid": "u-1", "generation": 1},
        "spec": {
            "duration": "90s",
            "epochs": 2,
            "resources": resources,
            "template": {"spec": {"containers": [trainer]}},
            "checkpoint": {"path": "/ckpt"},
        },
    }


GPU = {"mode": "gpu", "min": 1, "max": 4, "initial": 1}


def trainer_env(body: dict[str, Any], allocation: float) -> dict[str, str]:
    pod = build.build_trainer_pod(body, parse_job(body), allocation, "lm-0")
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize(("allocation", "workers"), [(1.0, "1"), (2.0, "2"), (3.0, "3")])
def test_gpu_pod_runs_one_worker_per_allocated_gpu(allocation: float, workers: str) -> None:
    env = trainer_env(job_body(GPU), allocation)
    assert env[contract.ENV_WORKERS] == workers == build.format_allocation("gpu", allocation)


def test_the_allocation_replaces_a_worker_count_in_the_template() -> None:
    body = job_body(GPU, env=[{"name": contract.ENV_WORKERS, "value": "8"}])
    assert trainer_env(body, 2.0)[contract.ENV_WORKERS] == "2"


def test_cpu_pod_sets_no_worker_count() -> None:
    cpu = {"mode": "cpu", "min": "250m", "max": "2", "initial": "2"}
    assert contract.ENV_WORKERS not in trainer_env(job_body(cpu), 2.0)


@pytest.mark.parametrize(
    ("policy", "trainer_word"),
    [("fixedGlobal", "fixed-global"), ("scaleWithWorkers", "scale-with-workers")],
)
def test_the_batch_policy_reaches_the_trainer_in_its_words(policy: str, trainer_word: str) -> None:
    from decor_trainer.distributed import BATCH_POLICIES

    env = trainer_env(job_body({**GPU, "batchPolicy": policy}), 2.0)
    assert env[contract.ENV_BATCH_POLICY] == trainer_word
    assert trainer_word in BATCH_POLICIES  # a name the trainer accepts


def test_without_a_batch_policy_the_trainer_keeps_its_default() -> None:
    assert contract.ENV_BATCH_POLICY not in trainer_env(job_body(GPU), 2.0)


@pytest.mark.parametrize(
    ("resources", "why"),
    [
        ({**GPU, "batchPolicy": "linear"}, "must be one of fixedGlobal, scaleWithWorkers"),
        (
            {"mode": "cpu", "max": "2", "batchPolicy": "fixedGlobal"},
            "applies to mode gpu",
        ),
    ],
)
def test_a_bad_batch_policy_is_refused_naming_the_field(
    resources: dict[str, Any], why: str
) -> None:
    from decor.api.model import ManifestError

    with pytest.raises(ManifestError, match=why) as caught:
        parse_job(job_body(resources))
    assert caught.value.field == "spec.resources.batchPolicy"
