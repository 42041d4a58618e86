"""Pure builders of the operator: the trainer pod, the resize patch, conditions, status.

Every builder takes dicts and returns dicts, so these tests compare whole structures where
the shape matters (what the API server will receive) and single fields where only one does.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from decor.api import vocabulary
from decor.api.model import parse_job
from decor.core import build, control, policy
from decor.core.policy import CheckpointStorage

JOB_UID = "0b7a4c1e-5e0f-4d8e-9d43-3c1f4b8b9a01"


def job_body(**spec_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "duration": "90s",
        "epochs": 4,
        "stepsPerEpoch": 60,
        "resources": {"mode": "cpu", "min": "250m", "max": "2", "initial": "2"},
        "template": {
            "metadata": {"labels": {"team": "vision"}, "annotations": {"note": "x"}},
            "spec": {
                "containers": [
                    {
                        "name": "trainer",
                        "image": "localhost/decor/trainer:0.1.0",
                        "imagePullPolicy": "Never",
                        "command": ["python3", "-m", "decor_trainer.train"],
                        "env": [
                            {"name": "DECOR_EPOCHS", "value": "99"},
                            {"name": "KEEP", "value": "1"},
                        ],
                        "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}},
                    }
                ]
            },
        },
        "checkpoint": {"path": "/ckpt"},
        "metrics": {"port": 9100, "path": "/metrics"},
    }
    spec.update(spec_overrides)
    return {
        "apiVersion": "decor.dev/v1alpha1",
        "kind": "DeadlineTrainingJob",
        "metadata": {"name": "resnet", "namespace": "ml", "uid": JOB_UID, "generation": 1},
        "spec": spec,
    }


def gpu_body() -> dict[str, Any]:
    return job_body(resources={"mode": "gpu", "min": 1, "max": 4, "initial": 1})


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


# --- the trainer pod ----------------------------------------------------------------------------


def test_cpu_pod_resources_are_resizable_in_place() -> None:
    body = job_body()
    pod = build.build_trainer_pod(body, parse_job(body), 1.25, "resnet-0")
    trainer = pod["spec"]["containers"][0]
    assert trainer["resources"] == {
        "requests": {"memory": "1Gi", "cpu": "1250m"},
        "limits": {"memory": "1Gi", "cpu": "1250m"},
    }
    assert trainer["resizePolicy"] == [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]


def test_gpu_pod_requests_whole_gpus_and_leaves_cpu_alone() -> None:
    body = gpu_body()
    pod = build.build_trainer_pod(body, parse_job(body), 2.0, "resnet-3")
    trainer = pod["spec"]["containers"][0]
    assert trainer["resources"]["limits"] == {"memory": "1Gi", build.GPU_RESOURCE: "2"}
    assert trainer["resources"]["requests"] == {"memory": "1Gi", build.GPU_RESOURCE: "2"}
    assert "resizePolicy" not in trainer
    assert pod["metadata"]["annotations"][vocabulary.ANNOTATION_ALLOCATION] == "2"


def test_pod_is_owned_by_the_job_and_labelled() -> None:
    body = job_body()
    pod = build.build_trainer_pod(body, parse_job(body), 2.0, "resnet-0")
    meta = pod["metadata"]
    assert meta["name"] == "resnet-0"
    assert meta["namespace"] == "ml"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "decor.dev/v1alpha1",
            "kind": "DeadlineTrainingJob",
            "name": "resnet",
            "uid": JOB_UID,
            "controller": True,
        }
    ]
    assert meta["labels"] == {
        "team": "vision",
        vocabulary.LABEL_JOB: "resnet",
        vocabulary.LABEL_MANAGED_BY: vocabulary.MANAGED_BY,
    }
    assert meta["annotations"]["note"] == "x"
    assert meta["annotations"]["prometheus.io/scrape"] == "true"
    assert meta["annotations"]["prometheus.io/port"] == "9100"
    assert meta["annotations"]["prometheus.io/path"] == "/metrics"


def test_pod_environment_follows_the_contract() -> None:
    body = job_body()
    pod = build.build_trainer_pod(body, parse_job(body), 2.0, "resnet-0")
    env = env_of(pod["spec"]["containers"][0])
    assert env == {
        "KEEP": "1",
        "DECOR_EPOCHS": "4",  # the spec wins over the template's own value
        "DECOR_STEPS_PER_EPOCH": "60",
        "DECOR_CHECKPOINT_DIR": "/ckpt",
        "DECOR_METRICS_PORT": "9100",
        "DECOR_PROGRESS_FILE": build.PROGRESS_FILE,
    }


def test_optional_environment_is_left_out() -> None:
    body = job_body(checkpoint=None)
    del body["spec"]["stepsPerEpoch"]
    pod = build.build_trainer_pod(body, parse_job(body), 2.0, "resnet-0")
    env = env_of(pod["spec"]["containers"][0])
    assert "DECOR_STEPS_PER_EPOCH" not in env
    assert "DECOR_CHECKPOINT_DIR" not in env
    assert all(v["name"] != build.CHECKPOINT_VOLUME for v in pod["spec"]["volumes"])


def test_metrics_sidecar_is_a_native_sidecar_sharing_the_progress_volume() -> None:
    body = job_body(metrics={"port": 9200})
    pod = build.build_trainer_pod(body, parse_job(body), 2.0, "resnet-0")
    # hostPath checkpoints (the default without storage): the owner init container first
    owner, sidecar = pod["spec"]["initContainers"]
    assert owner["name"] == build.CHECKPOINT_OWNER_NAME
    assert sidecar["name"] == build.SIDECAR_NAME
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["image"] == "localhost/decor/trainer:0.1.0"
    assert sidecar["imagePullPolicy"] == "Never"
    assert sidecar["command"] == [
        "python3", "-m", "decor_trainer.sidecar", "--file", build.PROGRESS_FILE, "--port", "9200",
    ]  # fmt: skip
    assert sidecar["ports"] == [{"name": "metrics", "containerPort": 9200, "protocol": "TCP"}]
    # bounded like any container beside the trainer: counted exactly, accepted under quota
    assert sidecar["resources"]["requests"] == sidecar["resources"]["limits"]
    assert set(sidecar["resources"]["limits"]) == {"cpu", "memory"}
    assert sidecar["volumeMounts"] == [
        {"name": build.PROGRESS_VOLUME, "mountPath": build.PROGRESS_DIR, "readOnly": True}
    ]
    trainer = pod["spec"]["containers"][0]
    assert {"name": build.PROGRESS_VOLUME, "mountPath": build.PROGRESS_DIR} in trainer[
        "volumeMounts"
    ]
    assert {
        "name": build.PROGRESS_VOLUME,
        "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"},
    } in pod["spec"]["volumes"]


def test_sidecar_image_can_be_overridden() -> None:
    body = job_body()
    pod = build.build_trainer_pod(body, parse_job(body), 2.0, "resnet-0", sidecar_image="sidecar:2")
    images = {c["name"]: c["image"] for c in pod["spec"]["initContainers"]}
    # the container that runs as root is the operator's own image, never a configured one
    assert images == {
        build.SIDECAR_NAME: "sidecar:2",
        build.CHECKPOINT_OWNER_NAME: policy.DEFAULT_OPERATOR_IMAGE,
    }


def test_a_mount_elsewhere_does_not_count_as_the_checkpoint_volume() -> None:
    body = job_body(checkpoint={"path": "/ckpt-other"})
    body["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "d", "mountPath": "/ckpt"}
    ]
    body["spec"]["template"]["spec"]["volumes"] = [{"name": "d", "emptyDir": {}}]
    pod = build.build_trainer_pod(body, parse_job(body), 2.0, "p")
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": build.CHECKPOINT_VOLUME, "mountPath": "/ckpt-other"} in mounts


def test_default_checkpoint_volume_is_a_host_path_per_job_uid() -> None:
    body = job_body()
    pod = build.build_trainer_pod(
        body, parse_job(body), 2.0, "resnet-0", checkpoint_host_root="/data/ck/"
    )
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == build.CHECKPOINT_VOLUME)
    assert volume["hostPath"] == {
        "path": f"/data/ck/ml/resnet/{JOB_UID}",
        "type": "DirectoryOrCreate",
    }
    trainer = pod["spec"]["containers"][0]
    assert {"name": build.CHECKPOINT_VOLUME, "mountPath": "/ckpt"} in trainer["volumeMounts"]


@pytest.mark.parametrize("mount_path", ["/ckpt/run", "/ckpt/run/", "/ckpt"])
def test_checkpoint_volume_of_the_template_is_kept(mount_path: str) -> None:
    body = job_body(checkpoint={"path": "/ckpt/run"})
    spec = body["spec"]["template"]["spec"]
    spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "ckpt"}}]
    spec["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": mount_path}]
    pod = build.build_trainer_pod(body, parse_job(body), 2.0, "resnet-0")
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["data", build.PROGRESS_VOLUME]
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert all(m["name"] != build.CHECKPOINT_VOLUME for m in mounts)


def test_restart_policy_defaults_to_on_failure_and_never_always() -> None:
    body = job_body()
    assert (
        build.build_trainer_pod(body, parse_job(body), 2.0, "p")["spec"]["restartPolicy"]
        == "OnFailure"
    )
    body["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    assert (
        build.build_trainer_pod(body, parse_job(body), 2.0, "p")["spec"]["restartPolicy"] == "Never"
    )
    body["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    assert (
        build.build_trainer_pod(body, parse_job(body), 2.0, "p")["spec"]["restartPolicy"]
        == "OnFailure"
    )


def test_builder_does_not_modify_its_inputs() -> None:
    body = job_body()
    spec = parse_job(body)
    before_body, before_template = copy.deepcopy(body), copy.deepcopy(spec.template)
    build.build_trainer_pod(body, spec, 1.0, "resnet-0")
    assert body == before_body
    assert spec.template == before_template


def test_other_containers_and_init_containers_are_kept() -> None:
    body = job_body()
    tspec = body["spec"]["template"]["spec"]
    tspec["containers"].append({"name": "helper", "image": "busybox"})
    tspec["initContainers"] = [{"name": "fetch", "image": "busybox"}]
    pod = build.build_trainer_pod(body, parse_job(body), 2.0, "p")
    assert [c["name"] for c in pod["spec"]["containers"]] == ["trainer", "helper"]
    assert "resources" not in pod["spec"]["containers"][1]
    assert [c["name"] for c in pod["spec"]["initContainers"]] == [
        build.CHECKPOINT_OWNER_NAME,
        "fetch",
        build.SIDECAR_NAME,
    ]


def test_operator_labels_and_annotations_win_over_the_templates() -> None:
    body = job_body()
    body["spec"]["template"]["metadata"] = {
        "labels": {
            vocabulary.LABEL_JOB: "someone-else",
            vocabulary.LABEL_MANAGED_BY: "me",
            "team": "v",
        },
        "annotations": {"prometheus.io/port": "1", vocabulary.ANNOTATION_ALLOCATION: "99"},
    }
    pod = build.build_trainer_pod(body, parse_job(body), 2.0, "p")
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels[vocabulary.LABEL_JOB] == "resnet"
    assert labels[vocabulary.LABEL_MANAGED_BY] == vocabulary.MANAGED_BY
    assert labels["team"] == "v"
    assert annotations["prometheus.io/port"] == "9100"
    assert annotations[vocabulary.ANNOTATION_ALLOCATION] == "2000m"


CLAIM_STORAGE = CheckpointStorage(volume="claim", storage_class="fast", size="2Gi")


def test_pods_run_restricted_by_default() -> None:
    body = job_body()
    pod = build.build_trainer_pod(body, parse_job(body), 2.0, "p", checkpoint_storage=CLAIM_STORAGE)
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": build.TRAINER_UID,
        "runAsGroup": build.TRAINER_GID,
        "fsGroup": build.TRAINER_GID,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    trainer = pod["spec"]["containers"][0]
    assert trainer["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    (sidecar,) = pod["spec"]["initContainers"]  # no owner init container without hostPath
    assert sidecar["securityContext"] == {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def test_checkpoint_volume_is_the_jobs_claim_with_claim_storage() -> None:
    body = job_body()
    pod = build.build_trainer_pod(body, parse_job(body), 2.0, "p", checkpoint_storage=CLAIM_STORAGE)
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == build.CHECKPOINT_VOLUME)
    assert volume == {
        "name": build.CHECKPOINT_VOLUME,
        "persistentVolumeClaim": {"claimName": "resnet-checkpoint"},
    }
    trainer = pod["spec"]["containers"][0]
    assert {"name": build.CHECKPOINT_VOLUME, "mountPath": "/ckpt"} in trainer["volumeMounts"]


@pytest.mark.parametrize("storage", [None, CLAIM_STORAGE])
def test_a_claim_named_in_the_spec_is_mounted_whatever_the_storage(
    storage: CheckpointStorage | None,
) -> None:
    body = job_body(checkpoint={"path": "/ckpt", "claimName": "team-data"})
    spec = parse_job(body)
    pod = build.build_trainer_pod(body, spec, 2.0, "p", checkpoint_storage=storage)
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == build.CHECKPOINT_VOLUME)
    assert volume["persistentVolumeClaim"] == {"claimName": "team-data"}
    assert [c["name"] for c in pod["spec"]["initContainers"]] == [build.SIDECAR_NAME]
    assert build.build_checkpoint_claim(body, spec, CLAIM_STORAGE) is None  # the user's own


def test_host_path_checkpoints_are_handed_to_the_trainers_user() -> None:
    body = job_body()
    body["spec"]["template"]["spec"]["securityContext"] = {"runAsUser": 4242}
    storage = CheckpointStorage(volume="hostPath", host_root="/data/ck", owner_image="op:7")
    pod = build.build_trainer_pod(body, parse_job(body), 2.0, "p", checkpoint_storage=storage)
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == build.CHECKPOINT_VOLUME)
    assert volume["hostPath"]["path"] == f"/data/ck/ml/resnet/{JOB_UID}"
    owner = pod["spec"]["initContainers"][0]
    assert owner["name"] == build.CHECKPOINT_OWNER_NAME
    # root on a host directory: the operator's image, not the user's; one directory, CHOWN only
    assert owner["image"] == "op:7"
    assert owner["image"] != pod["spec"]["containers"][0]["image"]
    assert owner["command"] == ["chown", f"4242:{build.TRAINER_GID}", "/ckpt"]
    assert owner["volumeMounts"] == [{"name": build.CHECKPOINT_VOLUME, "mountPath": "/ckpt"}]
    assert owner["securityContext"]["runAsUser"] == 0
    assert owner["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert owner["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_the_owner_image_is_the_operators_own_from_the_environment() -> None:
    storage = CheckpointStorage.from_env({policy.ENV_OPERATOR_IMAGE: "registry/decor/operator:1"})
    assert storage.owner_image == "registry/decor/operator:1"
    assert CheckpointStorage.from_env({}).owner_image == policy.DEFAULT_OPERATOR_IMAGE


def test_checkpoint_claim_is_owned_by_the_job_unless_kept() -> None:
    body = job_body()
    claim = build.build_checkpoint_claim(body, parse_job(body), CLAIM_STORAGE)
    assert claim == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "resnet-checkpoint",
            "namespace": "ml",
            "labels": {
                vocabulary.LABEL_JOB: "resnet",
                vocabulary.LABEL_JOB_UID: JOB_UID,
                vocabulary.LABEL_MANAGED_BY: vocabulary.MANAGED_BY,
            },
            "ownerReferences": [build.owner_reference(body)],
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "2Gi"}},
            "storageClassName": "fast",
        },
    }
    kept = job_body(checkpoint={"path": "/ckpt", "keep": True})
    kept_claim = build.build_checkpoint_claim(kept, parse_job(kept), CheckpointStorage("claim"))
    assert kept_claim is not None
    assert "ownerReferences" not in kept_claim["metadata"]
    assert "storageClassName" not in kept_claim["spec"]  # the cluster's default class
    # the claim is this job's, not the next job's of the same name (another uid)
    assert build.claim_is_jobs(kept_claim, kept)
    successor = copy.deepcopy(kept)
    successor["metadata"]["uid"] = "another-uid"
    assert not build.claim_is_jobs(kept_claim, successor)
    assert not build.claim_is_jobs({"metadata": {"name": "resnet-checkpoint"}}, kept)


def test_no_checkpoint_claim_without_a_volume_to_make() -> None:
    no_path = job_body(checkpoint=None)
    assert build.build_checkpoint_claim(no_path, parse_job(no_path), CLAIM_STORAGE) is None
    body = job_body()
    assert build.build_checkpoint_claim(body, parse_job(body), CheckpointStorage()) is None
    own = job_body()
    tspec = own["spec"]["template"]["spec"]
    tspec["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "d"}}]
    tspec["containers"][0]["volumeMounts"] = [{"name": "d", "mountPath": "/ckpt"}]
    assert build.build_checkpoint_claim(own, parse_job(own), CLAIM_STORAGE) is None


# --- patches and quantities -----------------------------------------------------------------------


def test_resize_patch_sets_requests_and_limits_in_millicores() -> None:
    assert build.build_resize_patch(0.75, "trainer") == {
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "resources": {"requests": {"cpu": "750m"}, "limits": {"cpu": "750m"}},
                }
            ]
        }
    }


@pytest.mark.parametrize(
    ("mode", "value", "text"),
    [
        ("cpu", 2.0, "2000m"),
        ("cpu", 0.05, "50m"),
        ("cpu", 1.2345, "1234m"),
        ("gpu", 3.0, "3"),
        ("gpu", 1.0, "1"),
    ],
)
def test_allocation_quantities_round_trip(mode: str, value: float, text: str) -> None:
    assert build.format_allocation(mode, value) == text
    assert build.parse_allocation(mode, text) == pytest.approx(round(value, 3))


@pytest.mark.parametrize("quantity", [None, "lots", "", "-"])
def test_unreadable_quantities_are_none(quantity: Any) -> None:
    assert build.parse_allocation("cpu", quantity) is None


def test_the_effective_deadline_counts_the_duration_from_the_start() -> None:
    assert build.effective_deadline_s(parse_job(job_body()), 1000.0) == 1090.0


# --- conditions --------------------------------------------------------------------------------


def test_set_condition_keeps_transition_time_while_status_is_unchanged() -> None:
    first = build.set_condition([], "OnTrack", True, "A", "one", now_s=100.0, generation=1)
    assert first == [
        {
            "type": "OnTrack",
            "status": "True",
            "reason": "A",
            "message": "one",
            "lastTransitionTime": "1970-01-01T00:01:40Z",
            "observedGeneration": 1,
        }
    ]
    same = build.set_condition(first, "OnTrack", True, "B", "two", now_s=200.0, generation=2)
    assert same[0]["lastTransitionTime"] == "1970-01-01T00:01:40Z"
    assert (same[0]["reason"], same[0]["message"], same[0]["observedGeneration"]) == ("B", "two", 2)
    flipped = build.set_condition(same, "OnTrack", False, "C", "three", now_s=300.0)
    assert flipped[0]["lastTransitionTime"] == "1970-01-01T00:05:00Z"
    assert flipped[0]["status"] == "False"
    unknown = build.set_condition(flipped, "AtRisk", None, "D", "four", now_s=400.0)
    assert [c["type"] for c in unknown] == ["OnTrack", "AtRisk"]
    assert unknown[1]["status"] == "Unknown"
    assert first[0]["reason"] == "A"  # inputs are not modified


def statuses(conditions: list[dict[str, Any]]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in conditions}


def test_on_track_decision_sets_the_full_picture() -> None:
    result = build.conditions_for_decision([], vocabulary.CONDITION_ON_TRACK, "fine", now_s=1.0)
    assert statuses(result) == {
        "MetricsUnavailable": "False",
        "Complete": "False",
        "OnTrack": "True",
        "AtRisk": "False",
        "Infeasible": "False",
        "DeadlineMissed": "False",
    }


def test_metrics_unavailable_leaves_the_rest_untouched() -> None:
    before = build.conditions_for_decision(
        [], vocabulary.CONDITION_AT_RISK, "needs 1.9 cores", now_s=1.0
    )
    after = build.conditions_for_decision(
        before, vocabulary.CONDITION_METRICS_UNAVAILABLE, "gone", now_s=2.0
    )
    assert statuses(after) == {**statuses(before), "MetricsUnavailable": "True"}
    assert build.became_true(before, after, vocabulary.CONDITION_METRICS_UNAVAILABLE)
    recovered = build.conditions_for_decision(
        after, vocabulary.CONDITION_AT_RISK, "needs 1.9 cores", now_s=3.0
    )
    assert statuses(recovered) == statuses(before)


def test_infeasible_and_missed_deadlines() -> None:
    infeasible = build.conditions_for_decision(
        [], vocabulary.CONDITION_INFEASIBLE, "even MAX is late", now_s=1.0
    )
    assert statuses(infeasible)["Infeasible"] == "True"
    assert (
        build.get_condition(infeasible, "Infeasible")["reason"]
        == vocabulary.REASON_EVEN_MAX_TOO_SLOW
    )  # type: ignore[index]
    missed = build.conditions_for_decision(
        infeasible, vocabulary.CONDITION_DEADLINE_MISSED, "late", now_s=2.0
    )
    assert statuses(missed)["DeadlineMissed"] == "True"
    assert statuses(missed)["OnTrack"] == "False"


def test_a_deadline_set_in_the_past_keeps_infeasible_true() -> None:
    result = build.conditions_for_decision(
        [], vocabulary.CONDITION_DEADLINE_MISSED, "late", now_s=1.0, deadline_was_past=True
    )
    infeasible = build.get_condition(result, vocabulary.CONDITION_INFEASIBLE)
    assert infeasible is not None
    assert (infeasible["status"], infeasible["reason"]) == (
        "True",
        vocabulary.REASON_DEADLINE_IN_PAST,
    )
    starting = build.conditions_for_decision(
        [], vocabulary.DECISION_STARTING, "s", now_s=1.0, deadline_was_past=True
    )
    assert statuses(starting)["Infeasible"] == "True"
    assert statuses(starting)["OnTrack"] == "Unknown"


def test_completion_conditions_report_lateness() -> None:
    on_time = build.conditions_for_completion([], finished_s=95.0, deadline_s=100.0, now_s=96.0)
    assert statuses(on_time)["Complete"] == "True"
    assert statuses(on_time)["DeadlineMissed"] == "False"
    assert "5.0s before" in build.get_condition(on_time, "Complete")["message"]  # type: ignore[index]
    late = build.conditions_for_completion([], finished_s=103.0, deadline_s=100.0, now_s=104.0)
    assert statuses(late)["DeadlineMissed"] == "True"


@pytest.mark.parametrize("kind", vocabulary.CONDITION_TYPES)
def test_condition_types_are_the_controllers_and_the_planners(kind: str) -> None:
    assert kind in {
        vocabulary.CONDITION_ON_TRACK, vocabulary.CONDITION_AT_RISK, vocabulary.CONDITION_INFEASIBLE,
        vocabulary.CONDITION_METRICS_UNAVAILABLE, vocabulary.CONDITION_COMPLETE, vocabulary.CONDITION_DEADLINE_MISSED,
        vocabulary.CONDITION_ADMITTED, vocabulary.CONDITION_STALLED,
    }  # fmt: skip


def test_reasons_are_camel_case_constants() -> None:
    reasons = {
        v
        for k, v in vars(build).items()
        if k.startswith(("REASON_", "EVENT_")) and isinstance(v, str)
    }
    reasons -= {vocabulary.EVENT_NORMAL, vocabulary.EVENT_WARNING}
    for reason in reasons:
        assert reason[0].isupper() and reason.isalnum(), reason


# --- status, outcome, events ------------------------------------------------------------------


def test_outcome_deviation_is_relative_to_the_deadline_span() -> None:
    assert build.build_outcome(finished_s=1097.5, deadline_s=1100.0, start_s=1000.0) == {
        "finishedAt": "1970-01-01T00:18:17Z",
        "finishedAtSeconds": 1097.5,
        "late": False,
        "deviationPercent": -2.5,
    }
    assert build.build_outcome(1110.0, 1100.0, 1000.0)["deviationPercent"] == 10.0
    assert build.build_outcome(1110.0, 1100.0, 1000.0)["late"] is True
    assert "deviationPercent" not in build.build_outcome(5.0, 1.0, 2.0)  # deadline before start


def test_status_carries_progress_allocation_and_controller_state() -> None:
    state = control.State(policy="decor", allocation=1.5)
    observation = control.Observation(
        time_s=1050.0, steps_done=120, steps_total=240, allocation=1.5
    )
    status = build.build_status(
        phase=vocabulary.PHASE_RUNNING,
        mode="cpu",
        start_s=1000.0,
        deadline_s=1100.0,
        state=state,
        applied=1.5,
        desired=1.25,
        observation=observation,
        eta_s=1098.2,
        generation=3,
        conditions=[{"type": "OnTrack", "status": "True"}],
        pod="resnet-0",
        epochs_done=2.0,
    )
    assert status == {
        "phase": "Running",
        "startTime": "1970-01-01T00:16:40Z",
        "deadline": "1970-01-01T00:18:20Z",
        "controller": state.to_dict(),
        "allocation": "1500m",
        "desiredAllocation": "1250m",
        "conditions": [{"type": "OnTrack", "status": "True"}],
        "podName": "resnet-0",
        "observedGeneration": 3,
        "stepsDone": 120,
        "stepsTotal": 240,
        "progress": 0.5,
        "epochsDone": 2,
        "eta": "1970-01-01T00:18:18Z",
        "trainerStatus": {
            "progressPercentage": 50,
            "estimatedRemainingSeconds": 48,
            "lastUpdatedTime": "1970-01-01T00:17:30Z",
        },
    }
    assert control.State.from_dict(status["controller"]) == state


def test_status_without_a_sample_reports_nothing_it_does_not_know() -> None:
    status = build.build_status(
        phase=vocabulary.PHASE_PENDING,
        mode="gpu",
        start_s=0.0,
        deadline_s=10.0,
        state=control.State(policy="decor", allocation=2.0),
        applied=None,
        desired=2.0,
        eta_s=float("inf"),
    )
    assert status["allocation"] is None  # a merge patch removes it
    assert status["desiredAllocation"] == "2"
    assert not {"stepsDone", "progress", "eta", "observedGeneration", "trainerStatus"} & set(status)


def test_event_refers_to_the_job() -> None:
    event = build.build_event(
        job_body(),
        vocabulary.EVENT_WARNING,
        vocabulary.EVENT_DEADLINE_IN_PAST,
        "x" * 5000,
        now_s=60.0,
    )
    assert event["metadata"] == {"generateName": "resnet.", "namespace": "ml"}
    assert event["involvedObject"] == {
        "apiVersion": "decor.dev/v1alpha1",
        "kind": "DeadlineTrainingJob",
        "name": "resnet",
        "namespace": "ml",
        "uid": JOB_UID,
    }
    assert (event["type"], event["reason"]) == ("Warning", "DeadlineInPast")
    assert len(event["message"]) == build.EVENT_MESSAGE_MAX_CHARS
    assert event["firstTimestamp"] == event["lastTimestamp"] == "1970-01-01T00:01:00Z"


# --- reading pods back ----------------------------------------------------------------------------


def running_pod(
    *, spec_cpu: str = "1500m", status_cpu: str | None = "2", conditions: Any = ()
) -> dict[str, Any]:
    container_status: dict[str, Any] = {
        "name": "trainer",
        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
    }
    if status_cpu is not None:
        container_status["resources"] = {
            "requests": {"cpu": status_cpu},
            "limits": {"cpu": status_cpu},
        }
    return {
        "metadata": {"name": "resnet-0"},
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "resources": {"requests": {"cpu": spec_cpu}, "limits": {"cpu": spec_cpu}},
                }
            ]
        },
        "status": {
            "phase": "Running",
            "podIP": "10.88.0.7",
            "conditions": list(conditions),
            "containerStatuses": [container_status],
        },
    }


def test_applied_and_desired_cpu_are_read_from_status_and_spec() -> None:
    pod = running_pod()
    assert build.desired_cpu_cores(pod, "trainer") == 1.5
    assert build.applied_cpu_cores(pod, "trainer") == 2.0
    assert build.applied_cpu_cores(running_pod(status_cpu=None), "trainer") is None
    assert build.applied_cpu_cores(pod, "other") is None
    assert build.container_running(pod, "trainer")
    assert build.metrics_url(pod, 9100, "/metrics") == "http://10.88.0.7:9100/metrics"


def test_metrics_url_needs_an_ip_and_brackets_ipv6() -> None:
    pod = running_pod()
    pod["status"]["podIP"] = "fd00::7"
    assert build.metrics_url(pod, 9100, "/m") == "http://[fd00::7]:9100/m"
    del pod["status"]["podIP"]
    assert build.metrics_url(pod, 9100, "/m") is None


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ((), build.ResizeState()),
        ([{"type": "PodResizeInProgress", "status": "True"}], build.ResizeState(in_progress=True)),
        (
            [
                {
                    "type": "PodResizePending",
                    "status": "True",
                    "reason": "Deferred",
                    "message": "busy",
                }
            ],
            build.ResizeState(deferred=True, message="busy"),
        ),
        (
            [
                {
                    "type": "PodResizePending",
                    "status": "True",
                    "reason": "Infeasible",
                    "message": "too big",
                }
            ],
            build.ResizeState(infeasible=True, message="too big"),
        ),
        ([{"type": "PodResizeInProgress", "status": "False"}], build.ResizeState()),
        ([{"type": "Ready", "status": "True", "message": "ok"}], build.ResizeState()),
    ],
)
def test_resize_conditions(conditions: Any, expected: build.ResizeState) -> None:
    state = build.resize_state(running_pod(conditions=conditions))
    assert state == expected
    assert state.waiting == (expected.in_progress or expected.deferred)


def test_gpu_count_terminating_and_failure_readers() -> None:
    pod = {
        "metadata": {"name": "g-0", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "containers": [{"name": "trainer", "resources": {"limits": {build.GPU_RESOURCE: "2"}}}]
        },
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "trainer",
                    "state": {
                        "terminated": {
                            "reason": "OOMKilled",
                            "exitCode": 137,
                            "finishedAt": "2026-01-01T00:00:10Z",
                        }
                    },
                }
            ],
        },
    }
    assert build.pod_gpu_count(pod, "trainer") == 2.0
    assert build.is_terminating(pod)
    assert build.pod_phase(pod) == "Failed"
    assert build.pod_failure_reason(pod, "trainer") == "OOMKilled (exit code 137)"
    assert build.container_finished_s(pod, "trainer") == 1767225610.0
    pod["status"]["reason"] = "Evicted"
    pod["status"]["message"] = "low on memory"
    assert build.pod_failure_reason(pod, "trainer") == "Evicted: low on memory"
    crash_looping = {
        "status": {
            "containerStatuses": [
                {
                    "name": "trainer",
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
                }
            ]
        }
    }
    assert build.pod_failure_reason(crash_looping, "trainer") == "Error (exit code 1)"
    assert build.pod_phase({}) == "Pending"
    assert not build.is_terminating({"metadata": {}})


def test_pod_names_and_checkpoint_paths() -> None:
    assert build.pod_name("resnet", 0) == "resnet-0"
    assert build.pod_name("resnet", 12) == "resnet-12"
    body = job_body()
    body["metadata"].pop("namespace")
    assert (
        build.checkpoint_host_path(body) == f"/var/lib/decor/checkpoints/default/resnet/{JOB_UID}"
    )


def test_admission_conditions() -> None:
    fresh = build.conditions_at_admission(False, now_s=10.0, generation=1)
    assert statuses(fresh) == {"OnTrack": "Unknown"}
    past = build.conditions_at_admission(True, now_s=10.0, generation=1)
    assert statuses(past) == {"OnTrack": "Unknown", "Infeasible": "True"}
    assert build.get_condition(past, "Infeasible")["reason"] == vocabulary.REASON_DEADLINE_IN_PAST  # type: ignore[index]


def test_moving_the_deadline_sets_and_clears_deadline_in_past() -> None:
    ok = build.conditions_for_decision([], vocabulary.CONDITION_ON_TRACK, "fine", now_s=1.0)
    past = build.conditions_for_deadline(ok, True, now_s=2.0)
    assert build.get_condition(past, "Infeasible")["reason"] == vocabulary.REASON_DEADLINE_IN_PAST  # type: ignore[index]
    future = build.conditions_for_deadline(past, False, now_s=3.0)
    assert statuses(future)["Infeasible"] == "False"
    # An Infeasible verdict of the controller's own is not the deadline's to clear.
    slow = build.conditions_for_decision(
        [], vocabulary.CONDITION_INFEASIBLE, "even MAX is late", now_s=1.0
    )
    assert build.conditions_for_deadline(slow, False, now_s=2.0) == slow


def test_a_deadline_in_the_past_stays_the_reason_through_infeasible_decisions() -> None:
    # The control law answers a deadline before the start with Infeasible at MAX.
    result = build.conditions_for_decision(
        [], vocabulary.CONDITION_INFEASIBLE, "already past", now_s=1.0, deadline_was_past=True
    )
    infeasible = build.get_condition(result, vocabulary.CONDITION_INFEASIBLE)
    assert infeasible is not None
    assert (infeasible["status"], infeasible["reason"]) == (
        "True",
        vocabulary.REASON_DEADLINE_IN_PAST,
    )
    assert statuses(result)["DeadlineMissed"] == "True"


def test_outcome_of_a_job_whose_deadline_preceded_its_start() -> None:
    outcome = build.build_outcome(finished_s=200.0, deadline_s=50.0, start_s=100.0)
    assert outcome["late"] is True
    assert "deviationPercent" not in outcome


def test_containers_beside_the_trainer_are_counted_for_the_planner() -> None:
    """The planner hands out a node's cores minus what trainer pods hold beside their
    trainers: DECOR's sidecar and the template's bounded containers and native sidecars."""
    body = job_body()
    template = body["spec"]["template"]["spec"]
    bounded = {"limits": {"cpu": "250m", "memory": "64Mi"}}
    template["containers"].append({"name": "log", "image": "busybox", "resources": bounded})
    template["initContainers"] = [
        {"name": "proxy", "image": "busybox", "restartPolicy": "Always", "resources": bounded},
        {"name": "fetch", "image": "busybox", "resources": bounded},  # done before the trainer
    ]
    spec = parse_job(body)
    sidecar = build.sidecar_cpu_cores()
    assert sidecar == 0.05
    assert build.job_overhead_cpu_cores(spec) == pytest.approx(sidecar + 0.5)
    pod = build.build_trainer_pod(body, spec, 2.0, "resnet-0")
    assert build.pod_overhead_cpu_cores(pod) == pytest.approx(sidecar + 0.5)
    assert build.job_overhead_cpu_cores(parse_job(job_body())) == sidecar
